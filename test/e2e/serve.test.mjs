// End-to-end tests of `dllm serve` through the official openai client.
// The Go test serve/e2e_test.go starts the server on a tiny random model and
// runs this file with DLLM_BASE_URL (".../v1"), DLLM_MODEL and DLLM_API_KEY
// set; the model's text is gibberish, so only the protocol is checked.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.DLLM_BASE_URL;
const model = process.env.DLLM_MODEL;
if (!baseURL || !model) {
  throw new Error('set DLLM_BASE_URL and DLLM_MODEL (run through go test ./serve/ -run E2E)');
}
// DLLM_API_KEY: the key the server was started with, if any.
const apiKey = process.env.DLLM_API_KEY;
const client = new OpenAI({ baseURL, apiKey: apiKey ?? 'unused', maxRetries: 0, timeout: 60_000 });
const auth = apiKey ? { authorization: `Bearer ${apiKey}` } : {};
const messages = [{ role: 'user', content: 'Say hello.' }];

test('models lists the served model', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, [model]);
});

test('chat completion', async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 9, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.model, model);
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(['stop', 'length'].includes(c.finish_reason), c.finish_reason);
  assert.ok(r.usage.prompt_tokens > 0);
  assert.ok(r.usage.completion_tokens <= 9);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test('greedy decoding is deterministic and max_completion_tokens caps it', async () => {
  const a = await client.chat.completions.create({ model, messages, max_completion_tokens: 6, temperature: 0 });
  const b = await client.chat.completions.create({ model, messages, max_completion_tokens: 6, temperature: 0 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.ok(a.usage.completion_tokens <= 6);
});

test('chat completion stream', async () => {
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.ok(chunks.length >= 3, `only ${chunks.length} chunks`);
  const ids = new Set(chunks.map((c) => c.id));
  assert.equal(ids.size, 1, 'one id throughout');
  assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk'));
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const usage = chunks.at(-1);
  assert.deepEqual(usage.choices, []);
  assert.ok(usage.usage.completion_tokens > 0 && usage.usage.completion_tokens <= 12);
  const last = chunks.at(-2);
  assert.ok(['stop', 'length'].includes(last.choices[0].finish_reason));
  const text = chunks.flatMap((c) => c.choices.map((ch) => ch.delta.content ?? '')).join('');
  const whole = await client.chat.completions.create({ model, messages, max_tokens: 12, temperature: 0 });
  assert.equal(text, whole.choices[0].message.content, 'streamed text equals the whole response');
});

test('raw stream ends with [DONE]', async () => {
  const resp = await fetch(`${baseURL}/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth },
    body: JSON.stringify({ model, messages, max_tokens: 4, stream: true }),
  });
  assert.equal(resp.status, 200);
  assert.match(resp.headers.get('content-type'), /^text\/event-stream/);
  const events = (await resp.text()).split('\n\n').filter((e) => e !== '');
  assert.ok(events.every((e) => e.startsWith('data: ')));
  assert.equal(events.at(-1), 'data: [DONE]');
});

test('text completion from token ids and from text', async () => {
  const a = await client.completions.create({ model, prompt: [5, 6, 7, 8], max_tokens: 5, temperature: 0 });
  assert.equal(a.object, 'text_completion');
  assert.equal(typeof a.choices[0].text, 'string');
  assert.equal(a.usage.prompt_tokens, 4);
  const b = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 3 });
  assert.ok(b.usage.completion_tokens <= 3);
});

test('thinking switch and stop strings are accepted', async () => {
  const r = await client.chat.completions.create({
    model, messages, max_tokens: 8, stop: ['\n\n', 'zzz'], seed: 1, temperature: 0.8, top_p: 0.9,
    chat_template_kwargs: { enable_thinking: false },
  });
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
});

test('bad requests are BadRequestError', async () => {
  for (const params of [
    { model, messages, n: 2 },
    { model, messages: [] },
    { model, messages, temperature: 5 },
    { model, messages, max_tokens: -1 },
    { model, messages: [{ role: 'wizard', content: 'x' }] },
  ]) {
    await assert.rejects(client.chat.completions.create(params), (err) => {
      assert.ok(err instanceof OpenAI.BadRequestError, `${JSON.stringify(params)}: ${err}`);
      assert.equal(err.status, 400);
      assert.equal(err.error?.type ?? err.type, 'invalid_request_error');
      return true;
    });
  }
});

test('a wrong or missing API key is AuthenticationError; /health needs none', { skip: !apiKey && 'no API key' }, async () => {
  for (const key of [`${apiKey}x`, 'sk-wrong']) {
    const stranger = new OpenAI({ baseURL, apiKey: key, maxRetries: 0 });
    await assert.rejects(stranger.chat.completions.create({ model, messages, max_tokens: 2 }), (err) => {
      assert.ok(err instanceof OpenAI.AuthenticationError, `${err}`);
      assert.equal(err.status, 401);
      assert.equal(err.code, 'invalid_api_key');
      return true;
    });
    await assert.rejects(stranger.models.list(), OpenAI.AuthenticationError);
  }
  const bare = await fetch(`${baseURL}/models`);
  assert.equal(bare.status, 401);
  assert.equal((await bare.json()).error.code, 'invalid_api_key');
  assert.equal((await fetch(baseURL.replace(/\/v1$/, '/health'))).status, 200);
});

test('unknown route is NotFoundError', async () => {
  await assert.rejects(client.embeddings.create({ model, input: 'x' }), OpenAI.NotFoundError);
});

test('a client that hangs up mid-stream stops its generation', async () => {
  const controller = new AbortController();
  const stream = await client.chat.completions.create(
    { model, messages, max_tokens: 4000, stream: true },
    { signal: controller.signal },
  );
  let seen = 0;
  try {
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.content && ++seen === 2) {
        controller.abort();
        // Chunks already buffered by the client may still be delivered after
        // abort(); leave the loop so only the server's side is under test.
        break;
      }
    }
  } catch (err) {
    // Depending on the client version an aborted stream ends or throws.
    assert.ok(err instanceof OpenAI.APIUserAbortError || err.name === 'AbortError', `${err}`);
  }
  assert.equal(seen, 2);
  // The generation is cancelled, not run to its 4000 tokens: the server is
  // free again at once.
  const start = Date.now();
  for (;;) {
    const health = await (await fetch(baseURL.replace(/\/v1$/, '/health'))).json();
    if (health.running === 0) break;
    assert.ok(Date.now() - start < 10_000, 'generation still running 10 s after the client left');
    await new Promise((r) => setTimeout(r, 20));
  }
  const r = await client.chat.completions.create({ model, messages, max_tokens: 3 });
  assert.equal(r.choices.length, 1);
});
