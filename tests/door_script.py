"""A scripted model for the door verbs' tests: one reply per program, told apart by its
instructions or output schema, and every program it was asked, in order."""

from __future__ import annotations

from typing import Any

from tests.conftest import field


class DoorScript:
    """Replies for the classifier, ``QA``, the reasoner's programs, the VoE predictor and
    the extraction policy. ``intent`` is what the classifier says; ``answer`` what ``QA``
    and the reasoner answer; ``prediction`` what the VoE predictor predicts."""

    def __init__(self, intent: str = "simple_recall", *, answer: str = "Lisbon",
                 evidence: tuple[str, ...] = (), prediction: str = "I love hiking",
                 needed: tuple[str, ...] = ("hiking",), on_call: Any = None) -> None:
        self.intent, self.answer, self.evidence = intent, answer, list(evidence)
        self.prediction, self.needed = prediction, list(needed)
        self.asked: list[str] = []
        self.seen: dict[str, list[str]] = {}
        self.on_call = on_call

    def __call__(self, system: str, user: str, schema: dict[str, Any] | None) -> Any:
        if self.on_call is not None:
            self.on_call()
        props = (schema or {}).get("properties", {})
        if "fact" in props:
            self.asked.append("voe.distil")
            self.seen.setdefault("voe.distil", []).append(user)
            return {"fact": f"The user said: {field(user, 'actual')}", "tags": ["surprise"],
                    "prediction": self.prediction, "needed_info": self.needed}
        if "prediction" in props:
            self.asked.append("voe.predict")
            self.seen.setdefault("voe.predict", []).append(user)
            return {"prediction": self.prediction, "needed_info": self.needed}
        if "lessons" in props:
            self.asked.append("distil")
            self.seen.setdefault("distil", []).append(user)
            return {"lessons": [{"title": "Probe the tram timetable first",
                                 "description": "When a question asks about Lisbon trams",
                                 "content": "Search the timetable for line 28 before "
                                            "answering about tram routes"}]}
        replies = (
            ("Classify what answering", "classify", {"intent": self.intent}),
            ("Write short keyword search queries", "plan", {"queries": ["Aurora gold"]}),
            ("Break the question into simple questions", "decompose", {
                "subquestions": ["Aurora gold on day 7?", "Aurora gold on day 10?"],
                "operation": "difference"}),
            ("Answer with the one number", "value", {"value": "5"}),
            ("Decide whether the numbered facts", "evaluate", {
                "sufficient": True, "missing": "", "queries": []}),
            ("Answer the question from the numbered facts", "reason", None),
            ("Answer the question in a few words", "qa", {
                "answer": self.answer, "evidence": self.evidence}),
        )
        for prefix, name, reply in replies:
            if system.startswith(prefix):
                self.asked.append(name)
                self.seen.setdefault(name, []).append(user)
                if name == "reason":
                    if "First write" in system:
                        return {"operands": [], "expression": "9 - 5", "answer": self.answer,
                                "used": [1, 2]}
                    return {"answer": self.answer, "used": [1, 2]}
                return reply
        raise AssertionError(f"unexpected program: {system[:80]}")


    def memories(self) -> str:
        """The memories block of the last ``QA`` prompt."""
        return field(self.seen["qa"][-1], "memories")
