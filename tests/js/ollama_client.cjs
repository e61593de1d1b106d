// Drives a tinyllm server with ollama-js, as its users do: node ollama_client.cjs URL MODEL
// Prints one JSON object of what each call gave, for tests/server/ollama/test_ollama_js.py to check.
const { Ollama } = require("ollama");

async function main() {
  const [host, model] = process.argv.slice(2);
  const client = new Ollama({ host });
  const out = {};
  // A schema as zod-to-json-schema writes it: no additionalProperties.
  const schema = { type: "object", properties: { legs: { type: "integer" } }, required: ["legs"] };
  const chat = await client.chat({
    model,
    messages: [{ role: "user", content: "How many legs?" }],
    format: schema,
    options: { temperature: 0, num_predict: 40, num_thread: 2, repeat_last_n: 64 },
  });
  out.format = { content: chat.message.content, done_reason: chat.done_reason };
  const parts = [];
  for await (const part of await client.generate({ model, prompt: "Once", stream: true, options: { num_predict: 5 } })) {
    parts.push(part);
  }
  out.stream = { pieces: parts.length, done: parts[parts.length - 1].done, eval_count: parts[parts.length - 1].eval_count };
  const embedded = await client.embed({ model, input: ["the sea", "a river"], dimensions: 8 });
  out.embed = embedded.embeddings.map((v) => v.length);
  out.list = (await client.list()).models.map((m) => ({ name: m.name, digest: m.digest }));
  const miro = { mirostat: 2, mirostat_tau: 3, seed: 7, num_predict: 6 };
  const twice = [];
  for (let i = 0; i < 2; i++) twice.push((await client.generate({ model, prompt: "Once", options: miro })).response);
  out.mirostat = twice;
  const unloaded = await client.generate({ model, prompt: "", keep_alive: 0 });
  out.unload = { done_reason: unloaded.done_reason, ps: (await client.ps()).models.length };
  out.reload = (await client.generate({ model, prompt: "Once", options: { num_predict: 2 } })).eval_count;
  out.ps = (await client.ps()).models.map((m) => m.name);
  try {
    await client.chat({ model: "no-such-model", messages: [{ role: "user", content: "hi" }] });
    out.missing = null;
  } catch (err) {
    out.missing = { status: err.status_code, error: err.error };
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack ? err.stack : err));
  process.exit(1);
});
