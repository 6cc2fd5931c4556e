"""The examples of the README, the guide and the reference hold.

* Every experience path (``procedures/<file>.json``) the README or the guide names is an experience of the shipped
  example workspace (``examples/bfcl-workspace``), which the README's first command copies, or is written as a
  placeholder (``procedures/<name>.json``); so are the trajectory copies the README names.
* The reference's example of an HTTP answer (ReMe's envelope holding the answer as a JSON string) is what the job
  answers: the same envelope from a real Application.
"""

from __future__ import annotations

import json
import re

from helpers import REPO

EXAMPLE = REPO / "examples" / "bfcl-workspace"
DOCS = {"README.md": REPO / "README.md", "docs/guide.md": REPO / "docs" / "guide.md"}
EXPERIENCE = re.compile(r"procedures/([^\s`'\"),]+?\.json)")
TRAJECTORY = re.compile(r"session/trajectories/([^\s`'\"),]+)")


def named(pattern: re.Pattern, text: str) -> list[str]:
    return [name for name in pattern.findall(text) if not name.startswith("<")]  # <name>: a placeholder


def test_every_experience_path_in_the_readme_and_guide_exists_in_the_example_workspace_or_is_a_placeholder():
    seen = 0
    for label, path in DOCS.items():
        for name in named(EXPERIENCE, path.read_text()):
            seen += 1
            assert (EXAMPLE / "procedures" / name).is_file(), (
                f"{label} names procedures/{name}, which examples/bfcl-workspace does not hold: use one of its "
                "experiences or write it as procedures/<name>.json"
            )
    assert seen >= 3  # the read and history examples at least: the pattern still finds them


def test_every_trajectory_copy_the_readme_names_exists_in_the_example_workspace():
    names = named(TRAJECTORY, DOCS["README.md"].read_text())
    assert names and all((EXAMPLE / "session" / "trajectories" / name).is_file() for name in names), names


def reference_http_example() -> tuple[dict, dict]:
    """The reference's HTTP example: the request body (from its curl) and the envelope it shows."""
    text = (REPO / "docs" / "reference.md").read_text()
    curl = re.search(r"```bash\ncurl [^\n]*/procedure_read[^`]*?-d '([^']*)'\n```", text)
    shown = re.search(r"```json\n(\{\"answer\":.*?)\n```", text)
    assert curl and shown, "the reference's HTTP example (curl, then the envelope) is gone"
    return json.loads(curl.group(1)), json.loads(shown.group(1))


async def test_the_reference_http_example_is_the_envelope_the_job_answers(make_app):
    body, shown = reference_http_example()
    async with make_app() as app:
        response = await app.run_job("procedure_read", **body)
    envelope = json.loads(response.model_dump_json())  # what ReMe's HTTP endpoint serialises (response_model)
    assert envelope == shown
    assert isinstance(shown["answer"], str) and json.loads(shown["answer"])["error"]["code"] == "not_found"
