// End-to-end test of the built-in demo model (models/demo: the CPU proxy's
// block-diffusion model, docs/proxy.md) through the official openai client.
// The Go test serve/e2e_test.go (TestE2EDemo) serves it and runs this file
// with DLLM_BASE_URL (".../v1") and DLLM_MODEL set.
//
// The questions are from the proxy's held-out split (`dllm data synth
// --seed 0`: never trained on). The model gets ~90% of that split right
// (docs/proxy.md), so the test asks two questions per task and wants at
// least 7 of the 8 right: one flip from a CPU's different float rounding
// does not fail it, a model that lost its skill does.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.DLLM_BASE_URL;
const model = process.env.DLLM_MODEL;
if (!baseURL || !model) {
  throw new Error('set DLLM_BASE_URL and DLLM_MODEL (run through go test ./serve/ -run E2EDemo)');
}
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });

const questions = [
  ['What is 900+343?', '1243'],
  ['What is 913+770?', '1683'],
  ['What is 183*9?', '1647'],
  ['What is 237*9?', '2133'],
  ['Which is largest?\nA) 57\nB) 40\nC) 17\nD) 11', 'A'],
  ['Which is smallest?\nA) 48\nB) 50\nC) 30\nD) 10', 'D'],
  ['a=26\nb=a-4\nc=b+5\nd=c+5\nWhat is d?', '32'],
  ['a=84\nb=a+8\nc=b+7\nd=c-7\nWhat is d?', '92'],
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
    if (m.content.trim() === `Answer: ${want}`) right++;
  }
  assert.ok(right >= 7, `${right} of ${questions.length} right:\n${replies.join('\n')}`);
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
