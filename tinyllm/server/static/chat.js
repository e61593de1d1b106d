// The chat page: a conversation sent to /v1/chat/completions (the model's chat template renders it on the
// server), streamed as server-sent events and shown as it comes; Stop aborts the request (the server then
// aborts it in the engine). The API key, when the server asks for one, is kept for this tab only.
"use strict";

(() => {
  const $ = (id) => document.getElementById(id);
  const KEY = "tinyllm.apiKey";
  const history = []; // {role, content} of the conversation so far
  let controller = null; // the running request's, while one runs

  class NeedsKey extends Error {}

  function headers() {
    const h = { "Content-Type": "application/json" };
    const key = sessionStorage.getItem(KEY);
    if (key) h.Authorization = `Bearer ${key}`;
    return h;
  }

  async function errorText(response) {
    try {
      const body = await response.json();
      return (body.error && (body.error.message || body.error)) || response.statusText;
    } catch {
      return `HTTP ${response.status}`;
    }
  }

  async function api(path, options = {}) {
    const response = await fetch(path, { ...options, headers: headers() });
    if (response.status === 401) throw new NeedsKey(await errorText(response));
    if (!response.ok) throw new Error(await errorText(response));
    return response;
  }

  async function* events(response) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        for (const line of block.split("\n")) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") return;
          yield JSON.parse(data);
        }
      }
    }
  }

  function number(id, parse) {
    const raw = $(id).value.trim();
    return raw === "" ? undefined : parse(raw);
  }

  function sampling() {
    const fields = {
      temperature: number("temperature", parseFloat),
      top_p: number("top_p", parseFloat),
      top_k: number("top_k", (v) => parseInt(v, 10)),
      max_tokens: number("max_tokens", (v) => parseInt(v, 10)),
      seed: number("seed", (v) => parseInt(v, 10)),
    };
    return Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined && !Number.isNaN(v)));
  }

  function addMessage(role) {
    const node = document.createElement("div");
    node.className = `message ${role}`;
    const body = document.createElement("div");
    body.className = "body";
    const status = document.createElement("div");
    status.className = "status";
    // A reasoning model's thinking (reasoning_content): collapsed above the answer, shown once some arrives.
    const thinking = document.createElement("details");
    thinking.className = "thinking";
    thinking.hidden = true;
    const label = document.createElement("summary");
    label.textContent = "Thinking";
    const thought = document.createElement("div");
    thought.className = "thought";
    thinking.append(label, thought);
    node.append(thinking, body, status);
    $("messages").append(node);
    node.scrollIntoView({ block: "end" });
    return { node, body, status, thinking, thought, markdown: window.Markdown.view(body, document) };
  }

  // Called every frame while a reply streams: only the blocks that changed are rendered again.
  function show(view, text, reasoning) {
    view.markdown.update(text);
    if (reasoning) {
      view.thinking.hidden = false;
      view.thought.textContent = reasoning;
    }
  }

  function setBusy(busy) {
    $("send").disabled = busy;
    $("stop").disabled = !busy;
  }

  function summary(usage, first, last, finish) {
    const n = usage ? usage.completion_tokens : 0;
    const seconds = first !== null && last > first ? (last - first) / 1000 : 0;
    const rate = n > 1 && seconds > 0 ? ((n - 1) / seconds).toFixed(1) : "–";
    return `${n} tokens · ${rate} tok/s · ${finish || "no finish reason"}`;
  }

  function askKey(then, message) {
    $("key-form").hidden = false;
    $("key-error").textContent = message || "";
    $("key").focus();
    $("key-form").onsubmit = (event) => {
      event.preventDefault();
      sessionStorage.setItem(KEY, $("key").value);
      $("key-form").hidden = true;
      then();
    };
  }

  async function loadModel() {
    try {
      const models = await (await api("/v1/models")).json();
      $("model").textContent = models.data[0].id;
      if (models.data.length > 1) {
        // A server of several models: each loads when first asked for (a first reply may take a while).
        const choice = $("models");
        for (const m of models.data) choice.append(new Option(m.id, m.id));
        choice.hidden = false;
        choice.onchange = () => ($("model").textContent = choice.value);
      }
    } catch (error) {
      if (error instanceof NeedsKey) askKey(loadModel, sessionStorage.getItem(KEY) ? error.message : "");
    }
  }

  async function reply() {
    const view = addMessage("assistant");
    const system = $("system").value.trim();
    const messages = system ? [{ role: "system", content: system }, ...history] : [...history];
    const body = { ...sampling(), model: $("model").textContent || undefined, messages, stream: true };
    body.stream_options = { include_usage: true };
    controller = new AbortController();
    setBusy(true);
    let text = "";
    let reasoning = "";
    let finish = null;
    let usage = null;
    let first = null;
    let last = null;
    let queued = false;
    try {
      const response = await api("/v1/chat/completions", {
        method: "POST",
        body: JSON.stringify(body),
        signal: controller.signal,
      });
      for await (const event of events(response)) {
        if (event.error) throw new Error(event.error.message);
        const choice = event.choices && event.choices[0];
        const delta = choice && choice.delta;
        if (delta && (delta.content || delta.reasoning_content)) {
          last = performance.now();
          if (first === null) first = last;
          text += delta.content || "";
          reasoning += delta.reasoning_content || "";
          if (!queued) {
            queued = true;
            requestAnimationFrame(() => {
              queued = false;
              show(view, text, reasoning);
            });
          }
        }
        if (choice && choice.finish_reason) finish = choice.finish_reason;
        if (event.usage) usage = event.usage;
      }
      history.push({ role: "assistant", content: text });
      view.status.textContent = summary(usage, first, last, finish);
    } catch (error) {
      if (error.name === "AbortError") {
        view.status.textContent = "stopped";
        if (text) history.push({ role: "assistant", content: text });
      } else if (error instanceof NeedsKey) {
        view.node.remove();
        const retry = () => {
          loadModel();
          reply();
        };
        askKey(retry, sessionStorage.getItem(KEY) ? error.message : "");
      } else {
        view.status.textContent = `error: ${error.message}`;
        view.status.classList.add("error");
      }
    } finally {
      controller = null;
      setBusy(false);
      show(view, text, reasoning);
    }
  }

  function send(event) {
    event.preventDefault();
    const text = $("prompt").value.trim();
    if (!text || controller) return;
    $("prompt").value = "";
    history.push({ role: "user", content: text });
    addMessage("user").body.textContent = text;
    reply();
  }

  $("composer").addEventListener("submit", send);
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) send(event);
  });
  $("stop").addEventListener("click", () => controller && controller.abort());
  $("clear").addEventListener("click", () => {
    if (controller) controller.abort();
    history.length = 0;
    $("messages").replaceChildren();
  });
  $("settings-toggle").addEventListener("click", () => {
    const open = $("settings").hidden;
    $("settings").hidden = !open;
    $("settings-toggle").setAttribute("aria-expanded", String(open));
  });
  $("settings").addEventListener("submit", (event) => event.preventDefault());
  loadModel();
})();
