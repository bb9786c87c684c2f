"""The assistant corpus's filler: users' everyday requests per topic and the assistant's
long replies to them (paragraphs, bullet lists, code blocks, markdown tables).

Nothing here states a user's fact: replies are composed from generic per-topic pools,
and the generator checks that no reply contains a value the user has stated.
"""

from __future__ import annotations

import random

# topic -> (requests a user makes, sentences of a reply, bullet items, code blocks, tables)
TOPICS: dict[str, dict[str, tuple[str, ...]]] = {
    "home": {
        "asks": ("How do I get rid of condensation on the windows?",
                 "What's a cheap way to make a rented flat feel cosier?",
                 "How do I fix a dripping tap myself?",
                 "Which houseplants survive a dark north-facing room?"),
        "says": ("Most of it comes down to airflow and moisture at the source.",
                 "Renters usually cannot change fixtures, so focus on textiles and light.",
                 "A worn washer is the usual culprit and costs very little to replace.",
                 "Start with the cheapest change and measure before you spend more.",
                 "Landlords are often happy to approve small improvements if you ask first.",
                 "Keep receipts and photos, which helps when the deposit comes back."),
        "bullets": ("Open windows for ten minutes each morning", "Use lids when cooking",
                    "Layer lamps at different heights", "Add a large rug to soften echo",
                    "Turn off the isolation valve before opening the tap",
                    "Snake plants and pothos tolerate low light"),
    },
    "money": {
        "asks": ("How much should I keep in an emergency fund?",
                 "Can you explain index funds like I'm new to this?",
                 "Is it worth paying off a low-interest loan early?",
                 "How do I stop impulse buying online?"),
        "says": ("A common rule of thumb is three to six months of essential expenses.",
                 "Index funds track a market instead of trying to beat it, so fees stay low.",
                 "The answer depends on the interest rate compared with what savings earn.",
                 "A cooling-off rule, waiting a couple of days before checkout, works well.",
                 "Automating transfers on payday removes most of the willpower involved.",
                 "Fees compound just like returns do, which is easy to underestimate."),
        "bullets": ("List fixed costs first", "Automate the savings transfer",
                    "Unsubscribe from retailer emails", "Review subscriptions quarterly",
                    "Keep the emergency fund in an easy-access account",
                    "Compare the total expense ratio, not just past returns"),
        "code": ("=SUMIFS(B:B, A:A, \"groceries\", C:C, \">=\"&DATE(2024,1,1))",
                 "monthly = income - sum(fixed.values())\nsavings = round(monthly * 0.2, 2)"),
        "tables": ("| Category | Share |\n|---|---|\n| Needs | 50% |\n| Wants | 30% |\n"
                   "| Savings | 20% |",),
    },
    "career": {
        "asks": ("How do I prepare for a performance review?",
                 "What's a good way to network when I hate small talk?",
                 "How do I write a cover letter that doesn't sound generic?",
                 "Should I take a course or learn on the job?"),
        "says": ("Bring concrete examples with numbers; reviewers remember outcomes.",
                 "Networking works better as helping people than as asking for things.",
                 "Open with the problem the team has and how you have solved it before.",
                 "Courses help with structure, but projects are what people ask about.",
                 "Keep a running document of wins, since memory fades by review time.",
                 "A short follow-up message after a conversation goes a long way."),
        "bullets": ("Collect three measurable results", "Ask for feedback before the review",
                    "Prepare one question for each interviewer", "Trim jargon from the letter",
                    "Pick a project that shows the skill", "Schedule one coffee chat a month"),
    },
    "code": {
        "asks": ("Can you explain Python decorators with an example?",
                 "What's the difference between a process and a thread?",
                 "How should I structure logging in a service?",
                 "Why is my recursive function hitting the recursion limit?",
                 "How do I write a good unit test for a function that calls an API?"),
        "says": ("A decorator is a function that takes a function and returns a new one.",
                 "Threads share memory; processes do not, which changes how they fail.",
                 "Log events with context rather than sentences, so they can be searched.",
                 "Deep recursion on large inputs is usually better written as a loop.",
                 "Replace the network call with a fake at the boundary and assert on inputs.",
                 "Keep side effects at the edges and the core logic pure, it tests easily."),
        "bullets": ("Use structured fields for request ids", "Prefer pure functions",
                    "Mock at the boundary, not deep inside", "Convert recursion to iteration",
                    "Add a timeout to every network call", "Name tests after the behaviour"),
        "code": ("def retry(times):\n    def wrap(fn):\n        def inner(*a, **kw):\n"
                 "            for n in range(times):\n                try:\n"
                 "                    return fn(*a, **kw)\n                except OSError:\n"
                 "                    if n == times - 1:\n                        raise\n"
                 "        return inner\n    return wrap",
                 "import logging\nlog = logging.getLogger(__name__)\n"
                 "log.info(\"order placed\", extra={\"order\": order_id, \"ms\": elapsed})",
                 "def flatten(items):\n    stack, out = [items], []\n    while stack:\n"
                 "        cur = stack.pop()\n        if isinstance(cur, list):\n"
                 "            stack.extend(reversed(cur))\n        else:\n"
                 "            out.append(cur)\n    return out"),
        "tables": ("| | Threads | Processes |\n|---|---|---|\n| Memory | shared | separate |\n"
                   "| Crash impact | whole program | one worker |\n| Start cost | low | higher |",),
    },
    "devops": {
        "asks": ("How do I keep secrets out of my git repository?",
                 "What's the point of a reverse proxy in front of my app?",
                 "How do I set up log rotation on a Linux server?",
                 "Should I use containers for a tiny side project?"),
        "says": ("Secrets belong in the environment or a secrets manager, never the repo.",
                 "A reverse proxy terminates TLS and lets you swap backends without downtime.",
                 "logrotate ships with most distributions and only needs a small config.",
                 "Containers pay off once you have more than one machine or environment.",
                 "Make every step idempotent so a failed run can simply be repeated.",
                 "Keep the previous release on disk so rollback is a single command."),
        "bullets": ("Add the env file to .gitignore", "Rotate any key that was committed",
                    "Terminate TLS at the proxy", "Compress rotated logs",
                    "Pin base image digests", "Keep one previous release for rollback"),
        "code": ("/var/log/myapp/*.log {\n    daily\n    rotate 14\n    compress\n"
                 "    missingok\n}",
                 "server {\n    listen 443 ssl;\n    location / {\n"
                 "        proxy_pass http://127.0.0.1:8000;\n    }\n}",
                 "#!/usr/bin/env bash\nrelease=$(date +%Y%m%d%H%M)\n"
                 "mkdir -p /srv/app/releases/$release\ncp -r build/* /srv/app/releases/$release/"),
    },
    "sql": {
        "asks": ("What's the difference between a LEFT JOIN and an INNER JOIN?",
                 "How do I find duplicate rows in a table?",
                 "When should I denormalise a schema?",
                 "How do transactions and isolation levels work?"),
        "says": ("An inner join keeps only matching rows; a left join keeps every left row.",
                 "Group by the columns that define a duplicate and keep groups above one.",
                 "Denormalise when reads dominate and the copy is cheap to keep in sync.",
                 "Isolation levels trade anomalies for concurrency; most apps use read committed.",
                 "Always look at the query plan before adding anything to the schema.",
                 "Statistics go stale after bulk loads, so analyse the table afterwards."),
        "bullets": ("Check the plan with EXPLAIN ANALYZE", "Filter early, join late",
                    "Avoid SELECT * in application code", "Batch large updates",
                    "Analyse after bulk loads", "Watch for implicit casts in predicates"),
        "code": ("SELECT email, count(*)\nFROM users\nGROUP BY email\nHAVING count(*) > 1;",
                 "BEGIN;\nUPDATE accounts SET balance = balance - 50 WHERE id = 1;\n"
                 "UPDATE accounts SET balance = balance + 50 WHERE id = 2;\nCOMMIT;"),
        "tables": ("| Join | Keeps |\n|---|---|\n| INNER | matches only |\n"
                   "| LEFT | all left rows |\n| FULL | everything |",),
    },
    "cooking": {
        "asks": ("Can you suggest three quick weeknight dinners?",
                 "How do I make rice that isn't mushy?",
                 "What can I batch-cook on Sunday for the week?",
                 "How do I get a crispy crust on roast potatoes?"),
        "says": ("Rinse the grains until the water runs clear and measure the water exactly.",
                 "Batch cooking works best with dishes that improve after a day in the fridge.",
                 "Parboil, rough up the edges, and roast in very hot fat for the crunch.",
                 "A sheet-pan dinner keeps the washing up to a single tray.",
                 "Salt the cooking water generously; it is the only chance to season inside.",
                 "Let roasted things rest a few minutes so the steam escapes."),
        "bullets": ("Chickpea and spinach curry", "Lemon orzo with roasted vegetables",
                    "Black bean tacos", "Miso-glazed aubergine", "Lentil soup with cumin",
                    "Fried rice with whatever is in the fridge"),
        "tables": ("| Dish | Time | Freezes well |\n|---|---|---|\n| Lentil soup | 40 min | yes |\n"
                   "| Bean chilli | 50 min | yes |\n| Stir-fry | 15 min | no |",),
    },
    "pets": {
        "asks": ("How do I trim my pet's nails without a fight?",
                 "What human foods are dangerous for animals?",
                 "How do I keep a pet calm during fireworks?",
                 "How much exercise does a young animal need?"),
        "says": ("Short sessions with treats build tolerance better than one long struggle.",
                 "Chocolate, grapes, onions and xylitol are the usual dangerous foods.",
                 "A quiet room, background noise and a familiar blanket help with loud nights.",
                 "Young animals need play in short bursts rather than long sessions.",
                 "Watch the body language and stop before the animal gets stressed.",
                 "Ask the vet before changing diet, especially for older animals."),
        "bullets": ("Trim a little at a time", "Reward after every paw",
                    "Close the curtains early", "Keep identification tags up to date",
                    "Use puzzle feeders", "Book a yearly check-up"),
    },
    "family": {
        "asks": ("How do I handle a toddler's tantrums in public?",
                 "What are good board games for mixed ages?",
                 "How do I keep in touch with relatives who live far away?",
                 "Any ideas for a family day out on a rainy weekend?"),
        "says": ("Stay calm and keep it boring; attention can reward the behaviour.",
                 "Cooperative games avoid the sulking that comes with one winner.",
                 "A regular time slot for calls works better than calling when you remember.",
                 "Museums with hands-on rooms are a safe bet when the weather turns.",
                 "Shared photo albums keep far-away relatives part of everyday life.",
                 "Plan one thing per day with children and leave the rest open."),
        "bullets": ("Name the feeling out loud", "Offer two choices instead of one order",
                    "Ticket to Ride", "Dixit", "A monthly video call", "Indoor climbing walls"),
    },
    "productivity": {
        "asks": ("How do I plan a week so the important stuff actually happens?",
                 "What's a good note-taking system?",
                 "How do I deal with too many meetings?",
                 "How do I stop checking email every five minutes?"),
        "says": ("Block time for the important work first, then fit everything else around it.",
                 "The best note system is the one you review; capture is the easy part.",
                 "Ask for an agenda; a meeting without one can often be an email.",
                 "Batch email into two or three fixed times a day and close the tab otherwise.",
                 "Weekly reviews catch the tasks that silently slip.",
                 "Write the next physical action, not the vague goal."),
        "bullets": ("Plan on Friday afternoon", "Keep a single inbox",
                    "Decline meetings without agendas", "Turn off notification badges",
                    "Review notes weekly", "Write tasks as verbs"),
        "tables": ("| Block | Use |\n|---|---|\n| Morning | deep work |\n| Midday | meetings |\n"
                   "| Late afternoon | admin |",),
    },
    "travel": {
        "asks": ("What should I pack for a four-day city break?",
                 "How do I beat jet lag?",
                 "Is travel insurance worth buying for short trips?",
                 "How early should I get to the airport for an international flight?"),
        "says": ("Pack for three days and plan to wash something; you will carry less.",
                 "Shift your sleep an hour a day before you leave and get morning light.",
                 "Insurance matters most for medical costs abroad, less for the ticket price.",
                 "Two to three hours is typical for international departures.",
                 "Keep documents and chargers in the bag that never gets checked.",
                 "Book the first night's transport in advance; it is the most stressful part."),
        "bullets": ("One pair of comfortable shoes", "A universal adapter",
                    "Copies of your documents", "A refillable water bottle",
                    "Offline maps downloaded", "A small first-aid kit"),
    },
    "reading": {
        "asks": ("How do I read more when I'm busy?",
                 "Should I take notes while reading non-fiction?",
                 "How do I remember what I read?"),
        "says": ("Small daily amounts beat occasional long sessions for most people.",
                 "Notes help if you write them in your own words rather than copying.",
                 "Explaining a chapter to someone else is the best test of understanding.",
                 "It is fine to abandon a book that is not working for you."),
        "bullets": ("Carry a book everywhere", "Read before bed instead of scrolling",
                    "Write one summary sentence per chapter", "Join a reading group"),
    },
    "fitness": {
        "asks": ("How do I avoid shin splints when running?",
                 "Is stretching before exercise actually useful?",
                 "How much protein do I need if I lift?",
                 "How do I stay motivated to exercise in winter?"),
        "says": ("Increase running volume slowly, around ten percent a week.",
                 "Dynamic warm-ups beat static stretching before a session.",
                 "Consistency over months matters more than any single workout.",
                 "Sleep is the cheapest recovery tool there is.",
                 "Track what you do, because progress is hard to see day to day.",
                 "A training partner makes skipping a session much harder."),
        "bullets": ("Warm up for ten minutes", "Progress slowly", "Rest one day a week",
                    "Sleep seven to nine hours", "Log every session", "Replace worn shoes"),
        "tables": ("| Day | Session |\n|---|---|\n| Mon | strength |\n| Wed | intervals |\n"
                   "| Sat | long easy |",),
    },
    "language": {
        "asks": ("What's the fastest way to build vocabulary in a new language?",
                 "How do I get over the fear of speaking a foreign language?",
                 "Are language apps enough on their own?"),
        "says": ("Spaced repetition is the most efficient way to keep new words.",
                 "Speaking early, badly, is how everyone learns to speak well.",
                 "Apps are a good start but conversation practice fills the real gap.",
                 "Listening to slow podcasts trains the ear between lessons."),
        "bullets": ("Ten new words a day", "Shadow short audio clips", "Find a tandem partner",
                    "Label things around the house", "Watch shows with subtitles"),
    },
}

OPENERS = ("Good question.", "Here's how I'd approach it.", "Sure, let's break it down.",
           "Happy to help with that.", "There are a few parts to this.",
           "Short answer first, then the details.", "This comes up a lot.")
GENERAL = ("It depends a little on your situation, but the basics hold for most people.",
           "The trade-off is time against money, as it often is.",
           "Try one change at a time, so you can tell what made the difference.",
           "People often overcomplicate this; a simple version gets you most of the way.",
           "If something here does not fit, tell me and I will adjust it.",
           "The details matter less than doing it consistently.",
           "Write down what you try and what happened; patterns show up after a few weeks.",
           "Most advice online assumes an ideal situation, so adapt it rather than copy it.",
           "Small, boring improvements tend to outlast dramatic ones.",
           "It is worth checking the official guidance too, since it changes over time.",
           "A good first step is to measure where you are now.",
           "Expect the first attempt to be rough; the second one is usually much better.")
PITFALLS = ("Changing too many things at once", "Skipping the boring preparation",
            "Copying someone else's setup without adapting it", "Giving up after one week",
            "Ignoring the cost of maintenance", "Not writing anything down",
            "Optimising before the basics work", "Assuming the first result is typical")
CLOSERS = ("Let me know if you want me to go deeper on any of these.",
           "Want me to turn this into a checklist?",
           "If you share more details I can tailor this further.",
           "Hope that helps, ping me with follow-up questions.")
SHORT = ("Glad it helped!", "You're welcome, good luck with it.", "Sounds like a plan.",
         "Makes sense. Anything else on your mind?", "Noted, thanks for the update.",
         "That's great to hear!")
THANKS = ("Thanks, that's really useful.", "Perfect, that's what I needed.", "Great, thanks!",
          "Ok, I'll try that tonight.", "That makes sense, cheers.")


def request(rng: random.Random, topic: str) -> str:
    """A user's everyday request on ``topic``."""
    return rng.choice(TOPICS[topic]["asks"])


def reply(rng: random.Random, topic: str, extra: tuple[str, ...] = ()) -> str:
    """A long markdown reply on ``topic``: paragraphs, a bullet list, maybe a code block and
    a table. ``extra`` sentences are placed in the first paragraph (the assistant's own
    recommendation, when it makes one)."""
    pool = TOPICS[topic]
    says = list(pool["says"]) + rng.sample(GENERAL, 6)
    rng.shuffle(says)
    parts = [" ".join([rng.choice(OPENERS), *extra, says.pop(), says.pop()])]
    while len(says) >= 2:
        parts.append(" ".join(says.pop() for _ in range(min(len(says), rng.randint(2, 3)))))
    heading = rng.choice(("**Key points**", "### Steps", "**What I'd do**", "#### Checklist"))
    bullets = rng.sample(pool["bullets"], min(len(pool["bullets"]), rng.randint(3, 5)))
    parts.append(heading + "\n" + "\n".join(f"- {b}" for b in bullets))
    if pool.get("code") and rng.random() < 0.7:
        lang = {"sql": "sql", "devops": "bash", "money": "text"}.get(topic, "python")
        parts.append(f"```{lang}\n{rng.choice(pool['code'])}\n```")
    if pool.get("tables") and rng.random() < 0.5:
        parts.append(rng.choice(pool["tables"]))
    pitfalls = rng.sample(PITFALLS, rng.randint(2, 4))
    parts.append("**Common pitfalls**\n" + "\n".join(f"{n}. {p}"
                                                     for n, p in enumerate(pitfalls, 1)))
    parts.append(rng.choice(CLOSERS))
    return "\n\n".join(parts)
