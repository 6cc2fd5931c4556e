"""Each job's answer shape is declared once (``answers.py``) and every answer the tests get is checked against it
(conftest's ``run_job``, ``helpers/answers.py``): these tests show that the check can fail."""

from __future__ import annotations

from reme_procedure_memory.answers import ANSWERS
from reme_procedure_memory.errors import ErrorCode, error_answer
from reme_procedure_memory.schema import Job

from helpers.answers import answer_problems

LISTED = {
    "path": "procedures/a.json",
    "version": "0123456789abcdef",
    "state": "indexed",
    "description": "d",
    "source_count": 1,
}
LIST_ANSWER = {
    "status": "ok",
    "experiences": [LISTED],
    "total": 1,
    "next": None,
    "index_complete": True,
    "pending_indexes": [],
}


def test_every_job_declares_its_answer():
    assert set(ANSWERS) == set(Job)


def test_an_answer_of_its_declared_shape_passes():
    assert answer_problems(Job.LIST, LIST_ANSWER) == []
    assert answer_problems(Job.LIST, error_answer(ErrorCode.NOT_FOUND, "No.", path="procedures/a.json")) == []


def test_a_missing_or_undeclared_key_is_named_also_nested():
    assert answer_problems(Job.LIST, {k: v for k, v in LIST_ANSWER.items() if k != "total"}) == [
        "answer: total missing"
    ]
    assert answer_problems(Job.LIST, {**LIST_ANSWER, "experiences": [{**LISTED, "size": 3}]}) == [
        "answer.experiences[0]: size not declared by ListedExperience"
    ]
    assert answer_problems(Job.LIST, {**LIST_ANSWER, "experiences": [{**LISTED, "state": "stale"}]}) == [
        "answer.experiences[0].state: 'stale' is not one of ('indexed', 'pending', 'unindexed', 'invalid')"
    ]


def test_an_undeclared_code_or_a_hand_built_envelope_is_named():
    refused = {"status": "error", "error": {"code": "protected_paths", "message": "No."}}
    assert answer_problems("write", refused) == ["error code 'protected_paths' is not in ErrorCode"]
    reordered = {"error": {"message": "No.", "code": ErrorCode.NOT_FOUND}, "status": "error"}
    assert answer_problems(Job.READ, reordered) == [
        "not error_answer's envelope: ['error', 'status'] / ['message', 'code']"
    ]
