"""Drives `radix serve` with the real `openai` Python client.

Run by tests/serve_openai.rs: `python serve_openai.py BASE_URL API_KEY TEXT...`.
Prints one JSON object of what came back; the Rust test compares it with
`radix generate` and `radix embed`.
"""

import json
import sys

import openai

base_url, api_key, *texts = sys.argv[1:]
client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=300)
out = {"openai_version": openai.__version__}

out["models"] = [m.id for m in client.models.list().data]

chat = dict(
    model="smollm2",
    messages=[{"role": "user", "content": "What is 2+2?"}],
    max_tokens=10,
    temperature=0,
)
r = client.chat.completions.create(**chat)
out["chat"] = {
    "text": r.choices[0].message.content,
    "role": r.choices[0].message.role,
    "finish_reason": r.choices[0].finish_reason,
    "usage": r.usage.model_dump(),
}
pieces, usage, finish = [], None, None
for chunk in client.chat.completions.create(
    **chat, stream=True, stream_options={"include_usage": True}
):
    if chunk.usage is not None:
        usage = chunk.usage.model_dump()
    for c in chunk.choices:
        pieces.append(c.delta.content or "")
        finish = c.finish_reason or finish
out["chat_stream"] = {"text": "".join(pieces), "usage": usage, "finish_reason": finish}

completion = dict(
    model="smollm2", prompt="The capital of France is", max_tokens=10, temperature=0
)
r = client.completions.create(**completion)
out["completion"] = {"text": r.choices[0].text, "usage": r.usage.model_dump()}
out["completion_stream"] = {
    "text": "".join(
        c.choices[0].text
        for c in client.completions.create(**completion, stream=True)
        if c.choices
    )
}

# The client asks for base64 unless told otherwise: both forms.
r = client.embeddings.create(model="minilm", input=texts)
out["embeddings_base64"] = [list(map(float, d.embedding)) for d in r.data]
r = client.embeddings.create(model="minilm", input=texts, encoding_format="float")
out["embeddings_float"] = [d.embedding for d in r.data]
out["embedding_usage"] = r.usage.model_dump()

errors = {}
try:
    client.chat.completions.create(**{**chat, "model": "gpt-4"})
except openai.BadRequestError as e:
    errors["unknown_model"] = {"status": e.status_code, "param": e.param}
try:
    openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0).models.list()
except openai.AuthenticationError as e:
    errors["wrong_key"] = {"status": e.status_code}
out["errors"] = errors

print(json.dumps(out))
