// End-to-end test of continuous batching through the official openai
// client: the demo model (models/demo) served with --max-num-seqs N. The Go
// test serve/e2e_test.go (TestE2EBatch) serves it and runs this file with
// DLLM_BASE_URL (".../v1"), DLLM_MODEL and DLLM_MAX_NUM_SEQS set.
//
// Every request, run beside others, must get the reply it gets alone
// (greedy, or sampled with the same seed): the same reasoning, content,
// finish reason and token count, streamed or not.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const baseURL = process.env.DLLM_BASE_URL;
const model = process.env.DLLM_MODEL;
const seqs = Number(process.env.DLLM_MAX_NUM_SEQS);
if (!baseURL || !model || !seqs) {
  throw new Error('set DLLM_BASE_URL, DLLM_MODEL and DLLM_MAX_NUM_SEQS (run through go test ./serve/ -run E2EBatch)');
}
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });

// Questions in the proxy's formats, of different lengths, so that the
// sequences finish at different steps and others join mid-run.
const questions = [
  'What is 423+801?', 'Sort in ascending order: 6, 5, 74, 94', 'What is 9+5?',
  'A shop has 56 pears.\nDay 1: it sells 11.\nDay 2: it gets 15 more.\nDay 3: it gets 54 more.\nDay 4: it sells 11.\nHow many pears does it have after day 4?',
  'Ava has 148 books and Eva has 85 books. How many more books does Ava have than Eva?',
  'Write a Python function f(n) that starts from n, doubles it, subtracts 6, then multiplies it by 6, and returns the result.',
  'Sort in descending order: 55, 34, 7', 'Sam has 59 books. He buys 8 bags with 15 books in each bag. How many books does Sam have now?',
];

const whole = (content, max_tokens, sampling = { temperature: 0 }) =>
  client.chat.completions.create({ model, messages: [{ role: 'user', content }], max_tokens, ...sampling })
    .then((r) => ({
      content: r.choices[0].message.content, reasoning: r.choices[0].message.reasoning_content,
      finish: r.choices[0].finish_reason, tokens: r.usage.completion_tokens,
    }));

const streamed = async (content, max_tokens, sampling = { temperature: 0 }) => {
  const s = await client.chat.completions.create({
    model, messages: [{ role: 'user', content }], max_tokens, ...sampling, stream: true, stream_options: { include_usage: true },
  });
  const out = { content: '', reasoning: '', finish: null, tokens: 0 };
  for await (const chunk of s) {
    const c = chunk.choices[0];
    out.content += c?.delta?.content ?? '';
    out.reasoning += c?.delta?.reasoning_content ?? '';
    out.finish = c?.finish_reason ?? out.finish;
    if (chunk.usage) out.tokens = chunk.usage.completion_tokens;
  }
  return out;
};

const metric = async (name) => {
  const text = await (await fetch(baseURL.replace(/\/v1$/, '') + '/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  return line === undefined ? undefined : Number(line.split(' ')[1]);
};

test('the server says how many requests it runs at once', async () => {
  const list = await client.models.list();
  assert.equal(list.data[0].max_num_seqs, seqs);
  assert.equal(await metric('dllm_max_num_seqs'), seqs);
});

test('requests run together get the replies they get alone', async () => {
  // Limits of different lengths: some end by length, some by their answer.
  const jobs = questions.flatMap((q, i) => [[q, 40 + 20 * i], [q, 200]]);
  const alone = [];
  for (const [q, max] of jobs) alone.push(await whole(q, max));
  const stepsBefore = await metric('dllm_batch_steps_total');
  const forwardsBefore = await metric('dllm_batch_sequence_forwards_total');
  const together = await Promise.all(jobs.map(([q, max], i) => (i % 2 ? streamed(q, max) : whole(q, max))));
  // A whole reply without reasoning has none; a stream's is empty.
  const norm = (r) => ({ ...r, reasoning: r.reasoning || '' });
  for (let i = 0; i < jobs.length; i++) {
    assert.deepEqual(norm(together[i]), norm(alone[i]), `${JSON.stringify(jobs[i])} ${i % 2 ? 'streamed' : 'whole'}`);
  }
  // They did share forwards: more sequence forwards than batched steps.
  const steps = (await metric('dllm_batch_steps_total')) - stepsBefore;
  const forwards = (await metric('dllm_batch_sequence_forwards_total')) - forwardsBefore;
  assert.ok(forwards > 1.5 * steps, `${forwards} sequence forwards in ${steps} steps`);
});

test('sampled requests run together get the replies they get alone with their seeds', async () => {
  // Two ways of sampling, so that the batch draws two groups at once.
  const jobs = questions.map((q, i) => [q, 120, i % 2 ? { temperature: 0.8, seed: i } : { temperature: 1, top_p: 0.9, seed: 100 + i }]);
  const alone = [];
  for (const [q, max, sampling] of jobs) alone.push(await whole(q, max, sampling));
  const together = await Promise.all(jobs.map(([q, max, sampling], i) => (i % 3 ? whole(q, max, sampling) : streamed(q, max, sampling))));
  const norm = (r) => ({ ...r, reasoning: r.reasoning || '' });
  for (let i = 0; i < jobs.length; i++) {
    assert.deepEqual(norm(together[i]), norm(alone[i]), JSON.stringify(jobs[i]));
  }
});
