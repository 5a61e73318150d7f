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

# Structured output: a JSON schema through response_format, greedy, sampled
# (three choices) and streamed; the Rust test validates every text.
schema = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 2},
    },
    "required": ["name", "age", "pets"],
    "additionalProperties": False,
}
fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}
ask = dict(
    model="smollm2",
    messages=[{"role": "user", "content": "Describe a person as JSON."}],
    max_tokens=150,
    response_format=fmt,
)
texts, finishes = [], []
r = client.chat.completions.create(**ask, temperature=0)
r3 = client.chat.completions.create(**ask, temperature=1.0, seed=5, n=3)
for c in r.choices + r3.choices:
    texts.append(c.message.content)
    finishes.append(c.finish_reason)
pieces = []
for chunk in client.chat.completions.create(**ask, temperature=0.8, seed=11, stream=True):
    for c in chunk.choices:
        pieces.append(c.delta.content or "")
        if c.finish_reason:
            finishes.append(c.finish_reason)
texts.append("".join(pieces))
out["json_schema"] = {"schema": schema, "texts": texts, "finishes": finishes}

# Log-probabilities of a greedy chat reply (compared with the logits of
# `radix generate --json --logits`): the whole prompt runs as `radix
# generate` runs it (llama.cpp's `cache_prompt: false`), since a prompt
# cache hit runs its last token in a step of its own, whose 8-bit
# activations may round otherwise.
r = client.chat.completions.create(
    **chat, logprobs=True, top_logprobs=3, extra_body={"cache_prompt": False}
)
out["logprobs"] = [
    {"token": c.token, "logprob": c.logprob, "top": [t.logprob for t in c.top_logprobs]}
    for c in r.choices[0].logprobs.content
]

# n = 3 with a seed, twice: the same three choices.
draw = dict(model="smollm2", prompt="Once upon a time", max_tokens=10, temperature=1.0, seed=7, n=3)
out["n3"] = [
    [c.text for c in sorted(client.completions.create(**draw).choices, key=lambda c: c.index)]
    for _ in range(2)
]

# Tool calling: a required call comes back as tool_calls, and a second
# turn with the tool's result completes.
weather = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 20}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
turn = [{"role": "user", "content": "What is the weather in Paris?"}]
r = client.chat.completions.create(
    model="smollm2", messages=turn, max_tokens=60, temperature=0,
    tools=[weather], tool_choice="required",
)
m = r.choices[0].message
out["tool_call"] = {
    "finish_reason": r.choices[0].finish_reason,
    "calls": [
        {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
        for c in (m.tool_calls or [])
    ],
}
if m.tool_calls:
    turn.append(m.model_dump(exclude_none=True))
    turn.append({"role": "tool", "tool_call_id": m.tool_calls[0].id, "content": '{"sky": "sunny", "c": 18}'})
    r = client.chat.completions.create(model="smollm2", messages=turn, max_tokens=20, temperature=0, tools=[weather])
    out["tool_call"]["second_turn"] = {"content": r.choices[0].message.content, "finish_reason": r.choices[0].finish_reason}

errors = {}
try:
    client.chat.completions.create(**{**chat, "model": "gpt-4"})
except openai.BadRequestError as e:
    errors["unknown_model"] = {"status": e.status_code, "param": e.param}
try:
    client.chat.completions.create(**{**chat, "extra_body": {"grammar": "root ::= ("}})
except openai.BadRequestError as e:
    errors["bad_grammar"] = {"status": e.status_code, "param": e.param}
try:
    openai.OpenAI(base_url=base_url, api_key="wrong", max_retries=0).models.list()
except openai.AuthenticationError as e:
    errors["wrong_key"] = {"status": e.status_code}
out["errors"] = errors

print(json.dumps(out))
