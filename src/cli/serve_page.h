// The chat page `nanoddp serve` answers GET / with (nanochat's ui.html, written anew): one
// self-contained HTML file, no external scripts, styles or fonts, so it works on a machine without
// internet access and loads nothing from anyone else.
//
// The page keeps the conversation and sends all of it with each message to POST /chat/completions,
// reading the reply as Server-Sent Events from the response body (EventSource cannot POST). What
// tests and scripts can rely on:
//   #message (textarea), #send (button), #messages (the list);
//   each reply is a .assistant element; its text grows as "token" events arrive;
//   data-chunks  token events shown so far;  data-reads  network reads that carried tokens;
//   data-done="1" once the "done" event came; data-error="1" (and class "error") when it failed.
// Text is set with textContent only: nothing the model or the user writes is parsed as HTML.
#pragma once

namespace nanoddp::cli {

inline constexpr const char* kServePage = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>nanoddp chat</title>
<style>
  * { box-sizing: border-box; }
  body { margin: 0; height: 100vh; display: flex; flex-direction: column;
         font: 15px/1.5 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif;
         background: #f6f7f9; color: #1d2330; }
  header { display: flex; align-items: center; gap: 16px; padding: 10px 20px;
           background: #fff; border-bottom: 1px solid #dde1e7; }
  header h1 { font-size: 17px; margin: 0; font-weight: 600; }
  header label { font-size: 13px; color: #5b6474; }
  header input { width: 80px; margin-left: 4px; padding: 2px 4px; border: 1px solid #c9ced6;
                 border-radius: 4px; font: inherit; font-size: 13px; }
  header .spacer { flex: 1; }
  button { font: inherit; border: 0; border-radius: 6px; padding: 8px 16px; cursor: pointer;
           background: #2f6fdd; color: #fff; }
  button.plain { background: #e8ebf0; color: #1d2330; }
  button:disabled { opacity: .5; cursor: default; }
  #messages { flex: 1; overflow-y: auto; padding: 20px; display: flex; flex-direction: column; gap: 12px; }
  .msg { max-width: 760px; padding: 10px 14px; border-radius: 10px; white-space: pre-wrap;
         overflow-wrap: anywhere; }
  .user { align-self: flex-end; background: #2f6fdd; color: #fff; }
  .assistant { align-self: flex-start; background: #fff; border: 1px solid #dde1e7; min-width: 40px;
               min-height: 1.5em; }
  .assistant:not([data-done]):not([data-error])::after { content: "\25CF"; margin-left: 4px;
               color: #9aa3b2; animation: blink 1s infinite; }
  .error { background: #fdecec; border-color: #f0b4b4; color: #8a1c1c; }
  .note { align-self: flex-start; font-size: 12px; color: #8a93a3; margin-top: -8px; }
  @keyframes blink { 50% { opacity: .2; } }
  form { display: flex; gap: 10px; padding: 12px 20px; background: #fff; border-top: 1px solid #dde1e7; }
  textarea { flex: 1; resize: none; height: 48px; padding: 10px; border: 1px solid #c9ced6;
             border-radius: 8px; font: inherit; }
</style>
</head>
<body>
<header>
  <h1>nanoddp chat</h1>
  <label>temperature<input id="temperature" type="number" min="0" step="0.1" placeholder="default"></label>
  <label>top_k<input id="top_k" type="number" min="0" step="1" placeholder="default"></label>
  <label>max_tokens<input id="max_tokens" type="number" min="1" step="1" placeholder="default"></label>
  <span class="spacer"></span>
  <button id="clear" class="plain" type="button">New chat</button>
</header>
<div id="messages"></div>
<form id="form">
  <textarea id="message" placeholder="Message (Enter sends, Shift+Enter is a new line)" autofocus></textarea>
  <button id="send" type="submit">Send</button>
</form>
<script>
"use strict";
const list = document.getElementById("messages");
const input = document.getElementById("message");
const send = document.getElementById("send");
let conversation = [];  // [{role, content}], sent whole with each message
let busy = false;

function show(cls, text) {
  const div = document.createElement("div");
  div.className = cls;
  div.textContent = text;
  list.appendChild(div);
  list.scrollTop = list.scrollHeight;
  return div;
}

// The sampling fields left empty take the server's flags.
function settings() {
  const out = {};
  for (const name of ["temperature", "top_k", "max_tokens"]) {
    const v = document.getElementById(name).value;
    if (v !== "") out[name] = Number(v);
  }
  return out;
}

// Reads "data: {...}" events separated by blank lines; calls onEvent per event, and onRead once per
// network read that held at least one token.
async function readEvents(response, onEvent, onRead) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end, tokens = 0;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of block.split("\n"))
        if (line.startsWith("data: ")) tokens += onEvent(JSON.parse(line.slice(6))) ? 1 : 0;
    }
    if (tokens > 0) onRead();
  }
}

async function submit() {
  const text = input.value.trim();
  if (!text || busy) return;
  busy = true;
  send.disabled = true;
  input.value = "";
  conversation.push({ role: "user", content: text });
  show("msg user", text);
  const reply = show("msg assistant", "");
  reply.dataset.chunks = "0";
  reply.dataset.reads = "0";
  let answer = "", finished = false;
  try {
    // The page sends the whole history each time. Once that outgrows the server's request limit
    // (--max_request_bytes, 413) the oldest exchanges go, as the server drops turns beyond the
    // model's context; without this every later message would fail.
    let response, dropped = 0;
    for (;;) {
      response = await fetch("/chat/completions", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(Object.assign({ messages: conversation }, settings())),
      });
      if (response.status !== 413 || conversation.length < 3) break;
      conversation.splice(0, 2);  // a user turn and its reply: roles still alternate
      dropped += 2;
    }
    if (dropped > 0)
      show("note", "the oldest " + dropped + " messages were left out: the conversation outgrew the server's " +
           "request limit");
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      throw new Error(body.error || response.status + " " + response.statusText);
    }
    await readEvents(response, (event) => {
      if (event.error) throw new Error(event.error);
      if (event.done) {
        finished = true;
        reply.dataset.tokens = event.tokens;
        if (event.dropped_messages > 0)
          show("note", "the oldest " + event.dropped_messages + " messages were left out to fit the model's context");
        return false;
      }
      answer += event.token;
      reply.textContent = answer;
      reply.dataset.chunks = Number(reply.dataset.chunks) + 1;
      list.scrollTop = list.scrollHeight;
      return true;
    }, () => { reply.dataset.reads = Number(reply.dataset.reads) + 1; });
    if (!finished) throw new Error("the reply ended early (server stopped?)");
    // The server rejects empty messages; an empty reply is kept as a space, as nanoddp chat does.
    conversation.push({ role: "assistant", content: answer || " " });
    reply.dataset.done = "1";
  } catch (e) {
    conversation.pop();  // the user turn without its reply: roles must alternate
    reply.classList.add("error");
    reply.textContent = (answer ? answer + "\n" : "") + "error: " + e.message;
    reply.dataset.error = "1";
  }
  busy = false;
  send.disabled = false;
  input.focus();
}

document.getElementById("form").addEventListener("submit", (e) => { e.preventDefault(); submit(); });
input.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); submit(); }
});
document.getElementById("clear").addEventListener("click", () => {
  if (busy) return;
  conversation = [];
  list.textContent = "";
  input.focus();
});
</script>
</body>
</html>
)HTML";

}  // namespace nanoddp::cli
