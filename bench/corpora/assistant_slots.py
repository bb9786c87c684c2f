"""The scripted facts of the assistant corpus: what a user may tell an assistant, how they
say it, and how they later ask about it.

Each :class:`Slot` is one kind of fact. A user draws one value dict per slot; ``v`` is the
answer (and ``w`` the second one: the new value of a changed fact, the second part of a
multi-message fact). Statement templates put the answer's exact text in the message, which
is what makes the labels right by construction; question templates never contain it and
are worded apart from the statements (several phrasings per slot, so no one wording wins).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Slot:
    """One kind of fact: its values, how a user states it, and how they ask about it.

    ``category`` is the question category (``changed-fact`` questions are split into
    ``changed-fact/current`` and ``changed-fact/previous``). ``states`` are user messages
    (``assistant-said``: the user's request, the answer being in ``advice``, sentences of
    the assistant's reply); ``second`` states ``w`` (the change, or the second part);
    ``asks`` ask for the current value (both parts for ``multi-message``); ``asks_before``
    for a changed fact's earlier value; ``distract`` are same-topic user messages that
    state nothing (``{other}`` is a value of this slot that is not the user's).
    """

    key: str
    category: str
    topic: str
    values: tuple[dict[str, str], ...]
    states: tuple[str, ...]
    asks: tuple[str, ...]
    second: tuple[str, ...] = ()
    asks_before: tuple[str, ...] = ()
    advice: tuple[str, ...] = ()
    distract: tuple[str, ...] = ()


def _vals(*rows: tuple[str, ...], keys: tuple[str, ...] = ("v",)) -> tuple[dict[str, str], ...]:
    return tuple(dict(zip(keys, row, strict=True)) for row in rows)


CITIES = ("Lyon", "Porto", "Denver", "Leeds", "Tallinn", "Osaka", "Valencia", "Montreal",
          "Adelaide", "Gdansk", "Bergen", "Utrecht", "Cork", "Graz", "Nantes", "Seville",
          "Ottawa", "Brno", "Bilbao", "Dunedin", "Halifax", "Tucson", "Leipzig", "Trieste")

CITY = Slot(
    "city", "changed-fact", "home",
    values=tuple({"v": a, "w": b} for a, b in zip(CITIES[::2], CITIES[1::2], strict=True)),
    states=(
        "I live in {v}, and the winters here are brutal on my heating bill.",
        "Here in {v} the rents keep climbing, honestly.",
        "I've been renting a flat in {v} for about three years now.",
        "Home for me is {v}, a short tram ride from the old town.",
        "Since I'm based in {v}, weekend trips are mostly by train.",
    ),
    second=(
        "Big news: we finally moved to {w} last week, boxes everywhere.",
        "The relocation is done, my new address is in {w}.",
        "We packed up and left for {w} at the end of the month.",
        "Settling into {w} now that the move is finished.",
        "New chapter: the lease in {w} is signed and we're in.",
    ),
    asks=(
        "Which city do I live in now?",
        "Where am I based these days?",
        "What town did I end up relocating to?",
        "Remind me where home is for me at the moment.",
        "Where is my current place?",
        "Which city should you assume I'm in when you suggest local stuff?",
    ),
    asks_before=(
        "Where was I living before the move?",
        "Which city did I leave behind?",
        "Where did I use to rent before relocating?",
        "What was my old hometown?",
    ),
    distract=(
        "What should I look for when choosing a neighbourhood in a new city?",
        "My cousin lives in {other}; what's a good housewarming gift to send?",
        "Is it cheaper to rent or buy a flat in a mid-sized European city?",
        "How do I set up utilities when I change apartments?",
        "A friend is visiting {other} next month, any tips for her?",
        "What's a sensible checklist for a long-distance move?",
    ),
)

BUDGET_WHAT = ("laptop", "road bike", "sofa", "camera", "espresso machine", "wedding venue",
               "used car", "standing desk", "holiday in Portugal", "kitchen renovation")
BUDGET_AMOUNTS = ("$1,200", "$850", "€2,000", "£650", "$3,500", "€900", "£1,400", "$480",
                  "€15,000", "$2,250", "£300", "€7,500", "$700", "£4,800", "€1,150", "$9,000")

BUDGET = Slot(
    "budget", "changed-fact", "money",
    values=tuple({"what": BUDGET_WHAT[i % len(BUDGET_WHAT)], "v": BUDGET_AMOUNTS[i],
                  "w": BUDGET_AMOUNTS[(i + 5) % len(BUDGET_AMOUNTS)]}
                 for i in range(len(BUDGET_AMOUNTS))),
    states=(
        "I can spend up to {v} on the {what}, not a cent more.",
        "For the {what} I've put aside {v}.",
        "My ceiling for the {what} is {v}, so keep suggestions under that.",
        "I'm looking at options for a {what}; {v} is the absolute max.",
        "We agreed {v} is what the {what} gets from our savings.",
    ),
    second=(
        "Change of plans on the {what}: the limit is now {w}.",
        "After the tax refund I can go to {w} for the {what}.",
        "I had to cut back, so the {what} money is {w} from here on.",
        "Update: the most I'll pay for the {what} is {w} now.",
    ),
    asks=(
        "What did I say my budget was?",
        "How much am I willing to pay for the {what} now?",
        "What's my current spending cap for the {what}?",
        "What price limit should you keep in mind for the {what}?",
        "How much money have I got for the {what} at this point?",
    ),
    asks_before=(
        "What was my original budget for the {what}, before I changed it?",
        "How much did I first plan to spend on the {what}?",
        "What was the first price ceiling I gave for the {what}?",
    ),
    distract=(
        "How do people usually budget for a big purchase?",
        "Is it smarter to pay for a {what} in instalments or all at once?",
        "What's the 50/30/20 rule everyone talks about?",
        "Can you make me a spreadsheet layout for tracking monthly spending?",
        "How much do {what}s usually depreciate in the first year?",
    ),
)

JOBS = (("data analyst", "at a hospital network"), ("backend developer", "at a freight startup"),
        ("primary school teacher", "in a public school"), ("UX researcher", "at a bank"),
        ("site reliability engineer", "at a game studio"), ("pharmacist", "in a clinic"),
        ("product manager", "at an e-commerce company"), ("civil engineer", "at a council"),
        ("technical writer", "at a robotics firm"), ("paralegal", "at a small law office"),
        ("nurse practitioner", "in a rural practice"), ("machine learning engineer",
                                                         "at an insurance company"))

JOB = Slot(
    "job", "changed-fact", "career",
    values=tuple({"v": JOBS[i][0], "at": JOBS[i][1], "w": JOBS[(i + 5) % len(JOBS)][0],
                  "at2": JOBS[(i + 5) % len(JOBS)][1]} for i in range(len(JOBS))),
    states=(
        "I work as a {v} {at}, so my days are pretty packed.",
        "My day job: {v} {at}.",
        "Being a {v} {at} means lots of meetings, unfortunately.",
        "I've been a {v} {at} for four years.",
    ),
    second=(
        "I accepted an offer! Starting Monday I'm a {w} {at2}.",
        "Career switch done: I'm now a {w} {at2}.",
        "I handed in my notice and took a role as {w} {at2}.",
        "First week in the new position as {w} {at2} went well.",
    ),
    asks=(
        "What do I do for a living now?",
        "What's my current role at work?",
        "What position did I move into?",
        "Remind me of my present occupation.",
    ),
    asks_before=(
        "What was my job before the switch?",
        "Which role did I leave?",
        "What was my previous occupation?",
    ),
    distract=(
        "How do I ask my manager for a raise without it being awkward?",
        "What are good questions to ask at the end of an interview?",
        "How should I structure a one-page CV?",
        "My friend is a {other}; is that a stressful career?",
        "How do I say no to extra work politely?",
    ),
)

RUNTIMES = ("Python 3.9", "Python 3.12", "Node 16", "Node 22", "Java 11", "Java 21",
            "Go 1.19", "Go 1.22", "Ruby 2.7", "Ruby 3.3", "PHP 7.4", "PHP 8.3")

RUNTIME = Slot(
    "runtime", "changed-fact", "code",
    values=tuple({"v": RUNTIMES[i], "w": RUNTIMES[i + 1]} for i in range(0, len(RUNTIMES), 2)),
    states=(
        "Our services run on {v}; upgrading isn't on the table yet.",
        "We're pinned to {v} in production, for context.",
        "Everything I maintain is still {v}.",
        "Keep in mind the servers only have {v} installed.",
    ),
    second=(
        "We finished the upgrade, production is on {w} now.",
        "Good news, the migration landed and we run {w} everywhere.",
        "Ops bumped all the boxes to {w} over the weekend.",
    ),
    asks=(
        "Which language version am I on now?",
        "What runtime version do my services use at the moment?",
        "What version should code you write for me target?",
    ),
    asks_before=(
        "Which version were we stuck on before the upgrade?",
        "What runtime did we migrate away from?",
    ),
    distract=(
        "What's the safest way to upgrade a language version across many services?",
        "How do I manage several interpreter versions on one laptop?",
        "Is it worth pinning dependencies exactly or using ranges?",
        "Why would a minor version bump break my build?",
    ),
)

ALLERGY = Slot(
    "allergy", "single-fact", "cooking",
    values=_vals(("peanuts",), ("shellfish",), ("sesame",), ("kiwi",), ("cashews",),
                 ("penicillin",), ("mustard seed",), ("hazelnuts",), ("celery",),
                 ("buckwheat",), ("lupin",), ("latex",)),
    states=(
        "I'm allergic to {v}, so keep those out of any recipes please.",
        "Heads-up: {v} make my throat swell, I carry an EpiPen.",
        "I react badly to {v} — found that out the hard way as a kid.",
        "Anything with {v} in it is a trip to the ER for me.",
        "My doctor confirmed the {v} allergy last year.",
    ),
    asks=(
        "What am I allergic to?",
        "Which ingredient do I have to stay away from?",
        "What triggers a reaction for me?",
        "Is there anything that's medically off-limits for me?",
        "What should you never put in food you suggest for me?",
    ),
    distract=(
        "What's the difference between an intolerance and an allergy?",
        "My coworker is allergic to {other}; what snacks could I bring to the office?",
        "How do restaurants handle allergy requests usually?",
        "Can you develop an allergy as an adult?",
        "What does an antihistamine actually do?",
    ),
)

PETS = (("Biscuit", "beagle"), ("Mochi", "tabby cat"), ("Juniper", "greyhound"),
        ("Waffles", "corgi"), ("Socks", "ragdoll cat"), ("Nimbus", "border collie"),
        ("Tofu", "rabbit"), ("Pippin", "dachshund"), ("Marble", "bengal cat"),
        ("Ziggy", "parrot"), ("Clementine", "golden retriever"), ("Bramble", "ferret"))

PET = Slot(
    "pet", "single-fact", "pets",
    values=_vals(*PETS, keys=("v", "kind")),
    states=(
        "My {kind} {v} chewed through another charger cable today.",
        "We adopted a {kind} last spring and named her {v}.",
        "{v}, my {kind}, has been scratching a lot lately.",
        "I have to walk {v} before work, so mornings are tight.",
        "Our {kind} is called {v}, she's three.",
    ),
    asks=(
        "What's my pet's name?",
        "What do I call my {kind}?",
        "What's the name of the animal I live with?",
        "Remind me what my {kind} is called.",
    ),
    distract=(
        "How often should a {kind} see the vet?",
        "My neighbour's {kind} barks all night, how do I bring it up?",
        "What are good enrichment toys for pets left alone during the day?",
        "Is pet insurance worth it?",
        "How do I introduce a new animal to a household that already has one?",
    ),
)

PARTNERS = (("Maya", "wife"), ("Tomas", "husband"), ("Priya", "partner"), ("Jonas", "boyfriend"),
            ("Ines", "girlfriend"), ("Rafael", "husband"), ("Keiko", "wife"),
            ("Dmitri", "partner"), ("Aoife", "wife"), ("Mateo", "husband"),
            ("Sanne", "girlfriend"), ("Olu", "partner"))

PARTNER = Slot(
    "partner", "single-fact", "family",
    values=_vals(*PARTNERS, keys=("v", "rel")),
    states=(
        "My {rel} {v} thinks I spend too long on my phone.",
        "{v} (my {rel}) and I are planning a small anniversary trip.",
        "I'm cooking for {v} tonight, my {rel}, who is very picky.",
        "Me and {v} have been together for six years.",
    ),
    asks=(
        "What's my {rel}'s name?",
        "Who is the person I'm in a relationship with?",
        "Who did I say I'm planning the anniversary with?",
        "What is my significant other called?",
    ),
    distract=(
        "What are thoughtful low-cost anniversary ideas?",
        "How do couples split chores fairly?",
        "My friend's {rel} {other} is visiting, what should we cook?",
        "How do I plan a surprise without the other person noticing?",
    ),
)

DEADLINE_WHAT = ("thesis draft", "grant proposal", "tax return", "conference slides",
                 "quarterly report", "portfolio review", "visa application", "book manuscript")
DATES = ("14 March", "2 June", "30 September", "11 November", "19 January", "7 August",
         "23 April", "28 February", "15 October", "5 December", "26 July", "9 May")

DEADLINE = Slot(
    "deadline", "single-fact", "productivity",
    values=tuple({"what": DEADLINE_WHAT[i % len(DEADLINE_WHAT)], "v": DATES[i]}
                 for i in range(len(DATES))),
    states=(
        "My {what} is due on {v} and I've barely started.",
        "I have to submit the {what} by {v}.",
        "The {what} cut-off is {v}, hard stop.",
        "Everything hinges on getting the {what} in before {v}.",
    ),
    asks=(
        "When is my {what} due?",
        "By what date must the {what} be finished?",
        "What's the last day I can hand in the {what}?",
        "How long do I have for the {what} — what's the date?",
    ),
    distract=(
        "How do I stop procrastinating on a big writing project?",
        "Can you explain the Pomodoro technique?",
        "What's a good way to break a large task into weekly milestones?",
        "How do I ask for an extension without sounding unprepared?",
        "Which is better for planning, a paper diary or a to-do app?",
    ),
)

FRAMEWORKS = ("Django", "Rails", "Laravel", "Spring Boot", "FastAPI", "Phoenix", "Flask",
              "Express", "ASP.NET Core", "SvelteKit", "NestJS", "Symfony")

FRAMEWORK = Slot(
    "framework", "single-fact", "code",
    values=_vals(*((f,) for f in FRAMEWORKS)),
    states=(
        "Our web app is built on {v}, in case that matters.",
        "The backend is {v} with a Postgres database.",
        "I maintain a {v} project at work, about 40k lines.",
        "We went with {v} for the API two years ago.",
    ),
    asks=(
        "Which web framework is my app built with?",
        "What's the stack behind my backend?",
        "What framework should your code examples assume for my project?",
    ),
    distract=(
        "How do I structure a large web app into modules?",
        "What's the best way to handle database migrations in a team?",
        "Is an ORM worth it for a small service?",
        "My friend uses {other}; is it still a good choice for new projects?",
    ),
)

CARS = ("Honda Fit", "Skoda Octavia", "Toyota Prius", "Subaru Outback", "Mazda MX-5",
        "Volvo V60", "Kia Niro", "Ford Focus", "Tesla Model 3", "Fiat Panda", "Renault Zoe",
        "Nissan Leaf")

CAR = Slot(
    "car", "single-fact", "travel",
    values=_vals(*((c,) for c in CARS)),
    states=(
        "I drive a {v}, so the boot space is limited.",
        "My {v} needs its annual service soon.",
        "We only have the old {v} for road trips.",
        "The {v} has done 120,000 km and still runs fine.",
    ),
    asks=(
        "What kind of vehicle do I have?",
        "Which car is mine?",
        "What do I drive?",
    ),
    distract=(
        "How often should tyres be rotated?",
        "Is it worth switching to an electric vehicle for city driving?",
        "What should be in a winter emergency kit for the car?",
        "My brother bought a {other}, is that reliable?",
    ),
)

# Standing instructions and preferences: each value brings its own statements and questions,
# since "metric" and "no emojis" are not said or asked about the same way.
INSTRUCTIONS = (
    {"v": "metric", "states": "Please always give measurements in metric.|Going forward, metric "
     "only, I never think in ounces or feet.|Quick rule for all your answers: metric, please.",
     "asks": "Which measurement system did I ask you to use?|How do I want quantities "
     "expressed?|Kilograms or pounds for me?"},
    {"v": "TypeScript", "states": "Whenever you show code, write it in TypeScript.|Code samples "
     "in TypeScript please, that's what my team reads.|Default to TypeScript for snippets.",
     "asks": "What programming language should examples be in for me?|Which language do I "
     "want your snippets written in?"},
    {"v": "emojis", "states": "No emojis in your replies, ever, please.|Please drop the emojis "
     "from answers, they annoy me.|I'd rather you never use emojis with me.",
     "asks": "Is there anything I told you to leave out of your replies?|What decoration did "
     "I ask you to stop adding to messages?"},
    {"v": "British spelling", "states": "Use British spelling with me, colour not color."
     "|I'd like British spelling in everything you write for me.",
     "asks": "Which spelling conventions do I want?|Should you write 'organize' or "
     "'organise' for me?"},
    {"v": "24-hour clock", "states": "Give times on the 24-hour clock, please.|I read the "
     "24-hour clock faster, use it for any times.",
     "asks": "How should you write times of day for me?|Do I want am/pm or something else?"},
    {"v": "bullet points", "states": "I prefer bullet points over long paragraphs.|Keep "
     "answers to bullet points where you can, I skim.",
     "asks": "How do I like your answers formatted?|What layout did I ask for in replies?"},
    {"v": "three sentences", "states": "Keep summaries to three sentences max.|Summaries "
     "longer than three sentences lose me, so stop there.",
     "asks": "How long should a summary be for me?|What length limit did I set for "
     "summaries?"},
    {"v": "Fahrenheit", "states": "Weather and oven temperatures in Fahrenheit please, I "
     "grew up with it.|I still think in Fahrenheit, so use that.",
     "asks": "Which temperature scale should you use with me?|Celsius or the other one?"},
)

PREFERENCES = (
    {"v": "aisle seat", "states": "I always book an aisle seat, window seats make me "
     "claustrophobic.|On flights I'm an aisle seat person.",
     "asks": "Where do I like to sit on a plane?|Which seat should you pick when booking "
     "my flights?"},
    {"v": "vegetarian", "states": "I've been vegetarian since university.|As a vegetarian "
     "I skip the meat dishes, obviously.",
     "asks": "What kind of diet do I follow?|Do I eat meat?"},
    {"v": "oat milk", "states": "I take oat milk in my coffee, dairy upsets my stomach."
     "|Flat white with oat milk is my daily order.",
     "asks": "How do I take my coffee?|What do I put in my cappuccino?"},
    {"v": "early mornings", "states": "I do my best thinking in early mornings, before 7."
     "|Schedule hard stuff for early mornings, that's when I focus.",
     "asks": "When am I most productive?|What time of day should deep work go in my "
     "calendar?"},
    {"v": "jazz", "states": "I mostly listen to jazz while I work.|Put jazz on and I can "
     "code for hours.",
     "asks": "What music do I like to work to?|Which genre helps me concentrate?"},
    {"v": "hiking", "states": "Weekends I'm usually out hiking.|My favourite way to "
     "unwind is hiking in the hills.",
     "asks": "What do I do to relax on weekends?|What's my go-to outdoor activity?"},
    {"v": "dark mode", "states": "I use dark mode on everything, bright screens give me "
     "headaches.|Dark mode always, in every app.",
     "asks": "Which display theme do I prefer?|Light or dark for my editor?"},
    {"v": "audiobooks", "states": "I get through most books as audiobooks on my commute."
     "|Audiobooks are how I read these days.",
     "asks": "How do I usually consume books?|What format do I read in?"},
)

# What the assistant recommended: the user's request in ``states``, the recommendation in
# ``advice`` (one sentence of the reply holds ``v``).
ADVICE = (
    Slot("deploy", "assistant-said", "devops",
         values=_vals(("rsync with --delete-after",), ("a blue-green symlink swap",),
                      ("set -euo pipefail at the top",), ("a systemd unit with Restart=always",),
                      ("a health-check curl before switching traffic",),
                      ("tagging each release with the git SHA",)),
         states=("Can you look over my deploy script? It's a bash file that copies the build "
                 "to the server and restarts the app.",
                 "My deploy script keeps leaving the site half-updated. What would you change?",
                 "Here's how I ship to production: scp the files, then restart. Improvements?"),
         asks=("What did you recommend for my deploy script?",
               "What was your main suggestion about how I ship releases?",
               "What fix did you propose for my half-updated deploys?"),
         advice=("My main recommendation: use {v}.", "The single biggest improvement would "
                 "be {v}.", "If you change one thing, make it {v}.")),
    Slot("book", "assistant-said", "reading",
         values=_vals(("Thinking in Systems",), ("The Mom Test",), ("Four Thousand Weeks",),
                      ("Atomic Habits",), ("The Design of Everyday Things",),
                      ("Range by David Epstein",)),
         states=("Can you suggest one book for me to read next? Something non-fiction.",
                 "I want a book that would actually change how I work. Any pick?",
                 "Give me a single reading recommendation for the holidays."),
         asks=("Which book did you suggest I read?", "What title did you point me to?",
               "What was the reading recommendation you gave me?"),
         advice=("I'd start with {v}.", "My pick for you is {v}.",
                 "Try {v}; it fits what you described.")),
    Slot("query", "assistant-said", "sql",
         values=_vals(("a composite index on (customer_id, created_at)",),
                      ("a partial index WHERE status = 'open'",),
                      ("replacing the OFFSET pagination with keyset pagination",),
                      ("moving the subquery into a CTE with MATERIALIZED",),
                      ("a covering index that INCLUDEs total_amount",)),
         states=("My orders query takes 9 seconds on a big table. How can I speed it up?",
                 "The report page times out on the database call. What would you do?",
                 "Why is this SELECT so slow once the table passed a few million rows?"),
         asks=("What did you tell me to add to make the slow query fast?",
               "What was your fix for the database timeout?",
               "What did you advise for my sluggish orders report?"),
         advice=("The fix I'd try first is {v}.", "Most of the time goes away with {v}.",
                 "I recommend {v}.")),
    Slot("training", "assistant-said", "fitness",
         values=_vals(("the Couch to 5K plan",), ("a 5/3/1 strength program",),
                      ("three full-body sessions a week",), ("zone 2 rides of 45 minutes",),
                      ("a kettlebell swing ladder",)),
         states=("I want to get fitter but I only have a few hours a week. What should I do?",
                 "What routine would you suggest for someone starting from zero?",
                 "Can you give me a workout plan I can actually stick to?"),
         asks=("What workout plan did you point me to?", "Which exercise routine did you "
               "suggest?", "What did you say I should do to get in shape?"),
         advice=("For your schedule I'd go with {v}.", "Start with {v} and review after a "
                 "month.", "My suggestion: {v}.")),
)

MULTI = (
    Slot("languages", "multi-message", "language",
         values=_vals(("Portuguese", "Korean"), ("Italian", "Japanese"), ("Greek", "Dutch"),
                      ("Swahili", "Polish"), ("Turkish", "Norwegian"), ("Hindi", "Czech"),
                      keys=("v", "w")),
         states=("I started learning {v} on an app this month.", "My {v} lessons are twice "
                 "a week now.", "I'm trying to get conversational in {v} before summer."),
         second=("I also signed up for an evening {w} class.", "On top of everything I "
                 "picked up {w} too.", "A coworker convinced me to start {w} with her."),
         asks=("Which languages am I studying?", "What languages did I say I'm learning?",
               "What are the foreign tongues I'm working on?")),
    Slot("siblings", "multi-message", "family",
         values=_vals(("Lukas", "Hannah"), ("Mario", "Sofia"), ("Kenji", "Yumi"),
                      ("Ahmed", "Leila"), ("Callum", "Freya"), ("Viktor", "Olga"),
                      keys=("v", "w")),
         states=("My brother {v} is an architect and never stops talking about it.",
                 "{v}, my older brother, is visiting next week."),
         second=("My sister {w} just had her first baby!", "{w} (my little sister) is "
                 "starting university in autumn."),
         asks=("What are my siblings called?", "Who are my brother and sister?",
               "What are the names of the people I grew up with at home?")),
    Slot("kids", "multi-message", "family",
         values=_vals(("Leo", "Nora"), ("Sami", "Elif"), ("Oscar", "Ivy"), ("Felix", "Mila"),
                      ("Hugo", "Ada"), ("Arjun", "Tara"), keys=("v", "w")),
         states=("My son {v} turns six next month and wants a dinosaur party.",
                 "{v}, my eldest, started piano lessons."),
         second=("My daughter {w} lost her first tooth today.", "Our youngest, {w}, won't "
                 "sleep past five am."),
         asks=("What are my children's names?", "What are my kids called?",
               "Who are my son and daughter?")),
)

SINGLE = (ALLERGY, PET, PARTNER, DEADLINE, FRAMEWORK, CAR)
CHANGED = (CITY, BUDGET, JOB, RUNTIME)
