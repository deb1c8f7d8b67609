// End-to-end test of the built-in demo model (models/demo: the CPU proxy's
// block-diffusion model, docs/proxy.md) through the official openai client.
// The Go test serve/e2e_test.go (TestE2EDemo) serves it and runs this file
// with DLLM_BASE_URL (".../v1") and DLLM_MODEL set.
//
// The questions are from the proxy's held-out split (`dllm data synth
// --tasks v2 --size cpu --seed 0`: never trained on), two per task family.
// The model gets ~96% of that split right (docs/proxy.md), so the test
// wants at least 9 of the 10 right: one flip from a CPU's different float
// rounding does not fail it, a model that lost its skill does. A code
// answer is right when it is the program the training data writes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.DLLM_BASE_URL;
const model = process.env.DLLM_MODEL;
if (!baseURL || !model) {
  throw new Error('set DLLM_BASE_URL and DLLM_MODEL (run through go test ./serve/ -run E2EDemo)');
}
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });

const code = (...lines) => ['```python', 'def f(n):', ...lines.map((l) => `    ${l}`), '```'].join('\n');
const questions = [
  ['What is 423+801?', 'Answer: 1224'],
  ['What is 8+478?', 'Answer: 486'],
  ['Sort in ascending order: 6, 5, 74, 94', 'Answer: 5, 6, 74, 94'],
  ['Sort in descending order: 78, 34, 42, 18', 'Answer: 78, 42, 34, 18'],
  ['A shop has 56 pears.\nDay 1: it sells 11.\nDay 2: it gets 15 more.\nDay 3: it gets 54 more.\nDay 4: it sells 11.\nHow many pears does it have after day 4?', 'Answer: 103'],
  ['A shop has 78 chairs.\nDay 1: it gets 14 more.\nDay 2: it gets 22 more.\nDay 3: it gets 45 more.\nHow many chairs does it have after day 3?', 'Answer: 159'],
  ['Sam has 59 books. He buys 8 bags with 15 books in each bag. How many books does Sam have now?', 'Answer: 179'],
  ['Ava has 148 books and Eva has 85 books. How many more books does Ava have than Eva?', 'Answer: 63'],
  ['Write a Python function f(n) that starts from n, doubles it, subtracts 6, then multiplies it by 6, and returns the result.',
    code('a = n * 2', 'b = a - 6', 'c = b * 6', 'return c')],
  ['Write a Python function f(n) that starts from n, takes the remainder after dividing by 3, doubles it, then adds n to it, and returns the result.',
    code('a = n % 3', 'b = a * 2', 'c = b + n', 'return c')],
];

const ask = (content) =>
  client.chat.completions.create({ model, messages: [{ role: 'user', content }], max_tokens: 200, temperature: 0 });

test('the demo model answers held-out questions, reasoning first, several tokens per forward', async () => {
  let right = 0;
  const replies = [];
  for (const [q, want] of questions) {
    const r = await ask(q);
    const m = r.choices[0].message;
    replies.push(`${JSON.stringify(q)} -> ${JSON.stringify(m.content)}`);
    // The step-by-step work comes back as reasoning, the answer as content.
    assert.ok(m.reasoning_content && m.reasoning_content.length > 10, `no reasoning for ${q}: ${JSON.stringify(m)}`);
    assert.equal(r.choices[0].finish_reason, 'stop');
    // Block diffusion: more than one token committed per forward.
    assert.ok(r.usage.dllm && r.usage.dllm.tpf > 1.5, `TPF ${JSON.stringify(r.usage)}`);
    if (m.content.trim() === want) right++;
  }
  assert.ok(right >= 9, `${right} of ${questions.length} right:\n${replies.join('\n')}`);
});

test('streamed, the demo model gives the same reply', async () => {
  const [q] = questions[0];
  const whole = await ask(q);
  const stream = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: q }], max_tokens: 200, temperature: 0, stream: true,
  });
  let content = '';
  let reasoning = '';
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta ?? {};
    content += d.content ?? '';
    reasoning += d.reasoning_content ?? '';
  }
  assert.equal(content, whole.choices[0].message.content);
  assert.equal(reasoning, whole.choices[0].message.reasoning_content);
});
