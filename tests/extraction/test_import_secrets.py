"""The secret guard inside a real import: the extraction agent's write tools go through the same
steps, so a write that copies a credential from the trajectory is answered ``secret_detected`` as a tool answer, the
agent retries with the placeholder the answer names, and the import completes with no copy of the secret anywhere in
the workspace but the byte-exact trajectory copy."""

from __future__ import annotations

import json

from conftest import import_file, memory_of
from helpers import summary
from helpers.corpus import write
from helpers.planted import planted

ITEMS = {item.label: item for item in planted(11)}
AWS, SLACK = ITEMS["akia"], ITEMS["xoxb"]
TRAJECTORY = "".join(
    json.dumps(message) + "\n"
    for message in [
        {"role": "user", "content": "Upload the nightly report to the reports bucket and tell the team."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "run_shell",
                        "arguments": json.dumps(
                            {"command": f"export AWS_ACCESS_KEY_ID={AWS.secret} && aws s3 cp report.csv s3://reports/"}
                        ),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "upload: report.csv to s3://reports/report.csv"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {
                        "name": "post_slack",
                        "arguments": json.dumps({"token": SLACK.secret, "text": "report uploaded"}),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_2", "content": "ok"},
    ]
)


def copies_the_secrets_then_uses_placeholders(answers: list):
    async def script(tools, prompt, kwargs):
        assert AWS.secret in prompt and SLACK.secret in prompt  # the segment shows the agent what it shows
        path = kwargs["injected_job_kwargs"]["_procedure_sources"][0]
        answers.append(await tools.call("procedure_read", kind="trajectory", path=path))
        content = (
            f"1. export AWS_ACCESS_KEY_ID={AWS.secret}, then aws s3 cp report.csv s3://reports/.\n"
            f"2. post_slack(token={SLACK.secret}, text='report uploaded')."
        )
        arguments = {
            "filename": "upload-report-and-notify.json",
            "description": "Upload the report, notify the team",
            "when_to_use": "When a nightly report must be uploaded and announced",
        }
        answers.append(await tools.call("procedure_create", **arguments, content=content))
        fixed = content.replace(AWS.secret, "<AWS_ACCESS_KEY_ID>").replace(SLACK.secret, "<SLACK_TOKEN>")
        answers.append(await tools.call("procedure_create", **arguments, content=fixed))
        return summary("Uploaded the report and notified the team; credentials replaced by placeholders.")

    return script


async def test_the_agent_gets_the_refusal_as_a_tool_answer_and_retries_with_placeholders(make_app, tmp_path):
    original = write(tmp_path, "run.jsonl", TRAJECTORY)
    answers: list = []
    async with make_app(scripts=[copies_the_secrets_then_uses_placeholders(answers)]) as app:
        ok, result = await import_file(app, original, request_id="with-secrets")
        assert ok and result["status"] == "complete", result
        (read_ok, read), (refused_ok, refused), (created_ok, created) = answers
        assert read_ok and read["text"] == TRAJECTORY and "secrets_masked" not in read  # the agent's read: unmasked
        assert not refused_ok and refused["error"]["code"] == "secret_detected"
        assert [(s["field"], s["kind"]) for s in refused["secrets"]] == [
            ("content", "aws_access_key"),
            ("content", "slack_token"),
        ]
        assert AWS.secret not in json.dumps(refused) and SLACK.secret not in json.dumps(refused)
        assert created_ok and created["status"] == "created", created
        assert result["experiences"]["created"] == ["procedures/upload-report-and-notify.json"]
        ws = memory_of(app).workspace_path
        copy = ws / result["path"]
        assert copy.read_bytes() == original.read_bytes()  # the copy stays byte-exact
        holders = [
            p.relative_to(ws).as_posix()
            for p in ws.rglob("*")
            if p.is_file() and (AWS.secret.encode() in p.read_bytes() or SLACK.secret.encode() in p.read_bytes())
        ]
        assert holders == [result["path"]]  # no experience, journal record, checkpoint or view state holds them
