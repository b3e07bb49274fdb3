/*! Tracon chat widget (embed.js). Hand-written, no dependencies, no build step.
 *
 * <script src="https://tracon.example/embed.js" data-agent="support" data-api-key="trk_…"
 *   data-endpoint="https://tracon.example" data-lang="tr" data-title="Help" async></script>
 *
 * - Shadow DOM: the host page's CSS cannot reach it, its CSS cannot reach the page.
 * - A turn is POST {endpoint}/api/agents/{agent}/run, read as server-sent events while it
 *   streams (`update` text deltas and tool calls and results, `approvals`, `done`, `error`).
 *   A typing indicator shows until the first token; each tool call is a status line
 *   ("Get order status…", or the frame's displayName), settled by its result.
 * - The session id and the transcript stay in localStorage per agent: a RunsWrite key
 *   cannot read /api/sessions, so a reload re-renders the stored transcript and the next
 *   message continues the same session.
 * - window.TraconWidget.registerTool(name, handler) implements a client-side tool the server
 *   declared; before this script loads, a page may queue registrations:
 *   window.TraconWidget = window.TraconWidget || {q: [], registerTool(n, h) { this.q.push([n, h]) }};
 * - Approval cards decide in-band ({sessionId, approvals}); the answer is the resumed run.
 * - Model text is Markdown rendered into DOM nodes (paragraphs, emphasis, code, lists,
 *   quotes, http(s)/mailto links): every piece of it is a text node, never parsed as HTML.
 * - A refused key or an unreachable server reads as "unavailable" in the chat; the detail
 *   for the page's developer goes to console.error.
 */
(() => {
  "use strict";
  const script = document.currentScript;
  if (!script) return;
  const data = script.dataset;
  const agent = data.agent;
  const apiKey = data.apiKey;
  if (!agent || !apiKey) {
    console.warn("Tracon widget: data-agent and data-api-key are required.");
    return;
  }
  const endpoint = (data.endpoint || new URL(script.src, location.href).origin).replace(/\/+$/, "");
  const runUrl = endpoint + "/api/agents/" + encodeURIComponent(agent) + "/run";

  // ---- strings ---------------------------------------------------------------------------
  const lang = (data.lang || document.documentElement.lang || "en").trim();
  const T = {
    en: {
      title: "Chat",
      open: "Open chat",
      close: "Close chat",
      label: "Message",
      placeholder: "Type a message…",
      send: "Send",
      approve: "Approve",
      deny: "Deny",
      approved: "Approved",
      denied: "Denied",
      needs: "Approval needed",
      log: "Messages",
      typing: "The assistant is typing…",
      unavailable: "The assistant is unavailable right now. Please try again later.",
      failed: "Something went wrong. Please try again.",
      cut: "The answer was interrupted. Please try again.",
    },
    tr: {
      title: "Sohbet",
      open: "Sohbeti aç",
      close: "Sohbeti kapat",
      label: "Mesaj",
      placeholder: "Bir mesaj yazın…",
      send: "Gönder",
      approve: "Onayla",
      deny: "Reddet",
      approved: "Onaylandı",
      denied: "Reddedildi",
      needs: "Onay gerekiyor",
      log: "Mesajlar",
      typing: "Asistan yazıyor…",
      unavailable: "Asistan şu anda kullanılamıyor. Lütfen daha sonra tekrar deneyin.",
      failed: "Bir sorun oluştu. Lütfen tekrar deneyin.",
      cut: "Yanıt yarıda kesildi. Lütfen tekrar deneyin.",
    },
  };
  const t = /^tr\b/i.test(lang) ? T.tr : T.en;
  const title = data.title || t.title;

  // ---- client-side tools (shared by every widget on the page) ------------------------------
  const queued = window.TraconWidget;
  const api =
    queued && queued.tools instanceof Map
      ? queued
      : {
          tools: new Map(),
          registerTool(name, handler) {
            if (typeof name !== "string" || !name || typeof handler !== "function") {
              throw new TypeError("registerTool(name, handler): a tool name and a function");
            }
            api.tools.set(name, handler);
          },
        };
  if (api !== queued) {
    const q = queued && (Array.isArray(queued) ? queued : queued.q);
    if (Array.isArray(q)) for (const [name, handler] of q) api.registerTool(name, handler);
    window.TraconWidget = api;
  }

  // ---- storage ------------------------------------------------------------------------------
  const store = {
    get(k) {
      try {
        return localStorage.getItem(k);
      } catch {
        return null;
      }
    },
    set(k, v) {
      try {
        localStorage.setItem(k, v);
      } catch {
        /* storage full or disabled: the widget still works for this page view */
      }
    },
  };
  const SESSION_KEY = "tracon:session:" + agent;
  const TRANSCRIPT_KEY = "tracon:transcript:" + agent;
  const MAX_KEPT = 100;
  const newId = () => {
    if (crypto.randomUUID) return crypto.randomUUID();
    // Not a secure context: randomUUID is missing, getRandomValues is not.
    return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
  };
  let sessionId = store.get(SESSION_KEY);
  if (!sessionId || !/^[A-Za-z0-9._:-]{1,128}$/.test(sessionId)) {
    sessionId = newId();
    store.set(SESSION_KEY, sessionId);
  }
  // Entries: {r: "u" | "a", t: text} or {r: "p", q: [approval requests], d: {requestId: bool}}.
  let transcript = [];
  try {
    transcript = JSON.parse(store.get(TRANSCRIPT_KEY) || "[]");
    if (!Array.isArray(transcript)) transcript = [];
  } catch {
    transcript = [];
  }
  const save = () => {
    transcript = transcript.slice(-MAX_KEPT);
    store.set(TRANSCRIPT_KEY, JSON.stringify(transcript));
  };

  // ---- DOM ----------------------------------------------------------------------------------
  const host = document.createElement("tracon-widget");
  host.style.cssText = "all:initial!important;position:fixed!important;z-index:2147483000!important";
  const root = host.attachShadow({ mode: "open" });
  root.innerHTML = `<style>
:host{all:initial}
*{box-sizing:border-box;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2328}
[hidden]{display:none!important}
button{cursor:pointer;border:0;border-radius:8px;padding:8px 12px;background:#2457c5;color:#fff;font-weight:600}
button:disabled{opacity:.55;cursor:default}
:focus-visible{outline:3px solid #f5a524;outline-offset:2px}
.vh{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}
.launch{position:fixed;right:20px;bottom:20px;width:56px;height:56px;border-radius:50%;padding:0;box-shadow:0 4px 14px #0004;display:grid;place-items:center}
.launch svg{width:26px;height:26px;fill:#fff}
.panel{position:fixed;right:20px;bottom:88px;width:min(380px,calc(100vw - 40px));height:min(560px,calc(100vh - 120px));display:flex;flex-direction:column;background:#fff;border:1px solid #d0d7de;border-radius:12px;box-shadow:0 8px 30px #0003;overflow:hidden}
header{display:flex;align-items:center;justify-content:space-between;padding:10px 12px;background:#2457c5}
header h2{margin:0;font-size:15px;font-weight:600;color:#fff}
header button{background:none;font-size:20px;line-height:1;padding:2px 8px}
.log{flex:1;overflow-y:auto;padding:12px;display:flex;flex-direction:column;gap:8px;background:#f6f8fa}
.m{max-width:85%;padding:8px 11px;border-radius:12px;white-space:pre-wrap;overflow-wrap:anywhere}
.u{align-self:flex-end;background:#2457c5;color:#fff}
.a{align-self:flex-start;background:#fff;border:1px solid #d0d7de;white-space:normal}
.a p,.a ul,.a ol,.a pre,.a blockquote{margin:0 0 6px}
.a>:last-child,.a blockquote>:last-child{margin-bottom:0}
.a p,.a li{white-space:pre-wrap}
.a ul,.a ol{padding-left:20px}
.a blockquote{border-left:3px solid #d0d7de;padding-left:8px}
.a code{font:12.5px/1.4 ui-monospace,Menlo,Consolas,monospace;background:#eff1f3;border-radius:4px;padding:1px 4px}
.a pre{padding:8px;background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;overflow-x:auto;white-space:pre}
.a pre code{background:none;padding:0}
.a a{color:#2457c5;text-decoration:underline}
.a hr{border:0;border-top:1px solid #d0d7de}
b,strong,.h{font-weight:700}
em{font-style:italic}
.typing{align-self:flex-start;display:flex;gap:4px;padding:12px 14px;background:#fff;border:1px solid #d0d7de}
.typing i{width:7px;height:7px;border-radius:50%;background:#8c959f;animation:d 1.2s infinite ease-in-out}
.typing i:nth-of-type(2){animation-delay:.15s}
.typing i:nth-of-type(3){animation-delay:.3s}
@keyframes d{40%{opacity:.35;transform:translateY(-3px)}}
@media (prefers-reduced-motion:reduce){.typing i{animation:none}}
.tool{align-self:flex-start;padding:0 4px;font-size:12.5px;color:#57606a}
.tool.ok::before{content:"✓ ";color:#1a7f37}
.e{align-self:stretch;background:#ffebe9;border:1px solid #ff8182;color:#82071e}
.card{align-self:stretch;background:#fff8c5;border:1px solid #d4a72c;border-radius:10px;padding:10px}
.card b{display:block;margin-bottom:4px}
.card pre{margin:6px 0;padding:6px;background:#fff;border-radius:6px;max-height:120px;overflow:auto;font:12px/1.4 ui-monospace,monospace;white-space:pre-wrap}
.card .deny{background:#cf222e;margin-left:6px}
form{display:flex;gap:8px;padding:10px;border-top:1px solid #d0d7de}
input{flex:1;min-width:0;padding:8px 10px;border:1px solid #8c959f;border-radius:8px;background:#fff}
</style>
<button class="launch" type="button" aria-expanded="false" aria-controls="p"><svg viewBox="0 0 24 24" aria-hidden="true"><path d="M4 4h16a2 2 0 0 1 2 2v10a2 2 0 0 1-2 2H9l-5 4v-4a2 2 0 0 1-2-2V6a2 2 0 0 1 2-2z"/></svg></button>
<div class="panel" id="p" role="dialog" hidden>
<header><h2></h2><button class="x" type="button">×</button></header>
<div class="log" role="log" aria-live="polite" tabindex="0"></div>
<form><label class="vh" for="i"></label><input id="i" autocomplete="off"><button type="submit"></button></form>
</div>`;
  const $ = (s) => root.querySelector(s);
  const launcher = $(".launch");
  const panel = $(".panel");
  const closer = $(".x");
  const log = $(".log");
  const form = $("form");
  const input = $("input");
  const sendButton = $("form button");
  launcher.setAttribute("aria-label", t.open);
  panel.setAttribute("aria-label", title);
  $("h2").textContent = title;
  closer.setAttribute("aria-label", t.close);
  log.setAttribute("aria-label", t.log);
  $("label").textContent = t.label;
  input.placeholder = t.placeholder;
  sendButton.textContent = t.send;

  const setOpen = (open) => {
    panel.hidden = !open;
    launcher.setAttribute("aria-expanded", String(open));
    (open ? input : launcher).focus();
    if (open) log.scrollTop = log.scrollHeight;
  };
  launcher.onclick = () => setOpen(panel.hidden);
  closer.onclick = () => setOpen(false);
  panel.addEventListener("keydown", (e) => {
    if (e.key === "Escape") {
      e.preventDefault();
      setOpen(false);
    }
  });

  const el = (tag, cls, text) => {
    const n = document.createElement(tag);
    if (cls) n.className = cls;
    if (text != null) n.textContent = text;
    return n;
  };
  const add = (node) => {
    log.append(node);
    log.scrollTop = log.scrollHeight;
    return node;
  };
  const bubble = (role, text) => add(el("div", "m " + role, text));
  const showError = (message) => bubble("e", message || t.failed);
  /** An assistant bubble showing `text` as Markdown. */
  const say = (text) => add(render(el("div", "m a"), text));

  let busy = false;
  const setBusy = (b) => {
    busy = b;
    sendButton.disabled = b;
  };

  // ---- Markdown ---------------------------------------------------------------------------------
  // A small, safe subset: paragraphs, fenced code, lists, quotes, rules, headings (as bold
  // lines); code spans, links, bold, italics, strikethrough, bare URLs. Model text only ever
  // becomes text nodes; the one attribute it reaches is a link's href, and only after the URL
  // parses as absolute http(s) or mailto. No HTML is parsed: `<img onerror>` stays text.
  const safeUrl = (raw) => {
    try {
      const u = new URL(raw);
      return /^(https?|mailto):$/.test(u.protocol) ? u.href : null;
    } catch {
      return null; // relative, or not a URL
    }
  };
  // 1-2 code span; 3-4 [text](url); 5 bare URL; 6-7 **, * or ~~; 8-10 _ or __ outside words.
  const INLINE =
    /(`+)([\s\S]*?[^`])\1(?!`)|\[([^\]\n]+)\]\(([^\s()]*(?:\([^\s()]*\)[^\s()]*)*)\)|(https?:\/\/[^\s<>"]*[^\s<>".,;:!?)\]'*_~])|(\*\*?|~~)(?=\S)([\s\S]*?\S)\6|(^|\W)(__?)(?=\S)([\s\S]*?\S)\9(?!\w)/g;
  const inline = (parent, text, inLink) => {
    let last = 0;
    for (const m of text.matchAll(INLINE)) {
      parent.append(text.slice(last, m.index));
      last = m.index + m[0].length;
      let node;
      if (m[1]) {
        node = el("code", "", m[2].replace(/^ ([\s\S]*) $/, "$1"));
      } else if (m[4] != null || m[5]) {
        const href = safeUrl(m[4] ?? m[5]);
        if (!href || inLink) {
          parent.append(m[0]); // a javascript: or relative link stays the text it was
          continue;
        }
        node = el("a");
        node.href = href;
        node.target = "_blank";
        node.rel = "noopener noreferrer";
        inline(node, m[3] ?? m[5], true);
      } else {
        const mark = m[6] || m[9];
        if (m[9]) parent.append(m[8]);
        node = el(mark === "~~" ? "s" : mark.length > 1 ? "strong" : "em");
        inline(node, m[7] ?? m[10], inLink);
      }
      parent.append(node);
    }
    parent.append(text.slice(last));
    return parent;
  };
  /** Replaces `target`'s children with `text` rendered as Markdown blocks. */
  const render = (target, text) => {
    const out = [];
    const lines = text.split(/\r\n?|\n/);
    let para = [];
    let list = null;
    const flush = () => {
      if (para.length) out.push(inline(el("p"), para.join("\n")));
      para = [];
    };
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      let m;
      if ((m = /^ {0,3}(`{3,}|~{3,})/.exec(line))) {
        // A fence runs to its closing fence, or to the end of what has streamed so far.
        flush();
        list = null;
        const body = [];
        while (++i < lines.length && !(lines[i].trim().startsWith(m[1]) && !lines[i].trim().slice(m[1].length).trim()))
          body.push(lines[i]);
        const pre = el("pre");
        pre.append(el("code", "", body.join("\n")));
        out.push(pre);
      } else if (!line.trim()) {
        flush();
        list = null;
      } else if (/^ {0,3}([-*_])( *\1){2,} *$/.test(line)) {
        flush();
        list = null;
        out.push(el("hr"));
      } else if ((m = /^ {0,3}#{1,6} +(.*?)(?: +#+)? *$/.exec(line))) {
        flush();
        list = null;
        out.push(inline(el("p", "h"), m[1]));
      } else if ((m = /^ {0,3}> ?(.*)$/.exec(line))) {
        flush();
        list = null;
        const quoted = [m[1]];
        while (i + 1 < lines.length && (m = /^ {0,3}> ?(.*)$/.exec(lines[i + 1]))) quoted.push(m[1]), i++;
        out.push(render(el("blockquote"), quoted.join("\n")));
      } else if ((m = /^ *(?:[-*+]|(\d{1,9})[.)]) +(.*)$/.exec(line))) {
        flush();
        const ordered = m[1] != null;
        if (!list || list.ordered !== ordered) {
          list = { node: el(ordered ? "ol" : "ul"), ordered };
          if (ordered && m[1] !== "1") list.node.start = +m[1];
          out.push(list.node);
        }
        list.src = m[2];
        list.node.append((list.li = inline(el("li"), m[2])));
      } else if (list && /^\s/.test(line)) {
        // An indented line continues the list item above it.
        list.src += "\n" + line.trim();
        list.li.replaceChildren();
        inline(list.li, list.src);
      } else {
        list = null;
        para.push(line);
      }
    }
    flush();
    target.replaceChildren(...out);
    return target;
  };

  // ---- approvals ------------------------------------------------------------------------------
  // One card per request of a stopped run; the run resumes once every request is decided,
  // so the decisions travel together.
  const renderApprovals = (entry) => {
    const d = entry.d || (entry.d = {});
    const cards = [];
    const decide = (requestId, approved, status, all) => {
      d[requestId] = approved;
      for (const b of all) b.disabled = true;
      input.focus(); // the pressed button is disabled: focus goes on to the message input
      status.textContent = approved ? t.approved : t.denied;
      save();
      if (entry.q.every((r) => r.requestId in d)) {
        const approvals = entry.q.map((r) => ({ requestId: r.requestId, approved: d[r.requestId] }));
        turn({ sessionId, approvals }).then((accepted) => {
          if (accepted) return;
          // Never reached the server (offline, refused): the cards can be decided again.
          for (const [id, buttons, st] of cards) {
            delete d[id];
            for (const b of buttons) b.disabled = false;
            st.textContent = "";
          }
          save();
        });
      }
    };
    for (const r of entry.q) {
      const card = el("div", "card");
      card.append(el("b", "", t.needs + ": " + r.toolName));
      card.append(el("pre", "", JSON.stringify(r.arguments, null, 2)));
      const status = el("span", "");
      const yes = el("button", "approve", t.approve);
      const no = el("button", "deny", t.deny);
      yes.type = no.type = "button";
      const mine = [yes, no];
      cards.push([r.requestId, mine, status]);
      if (r.requestId in d) {
        for (const b of mine) b.disabled = true;
        status.textContent = d[r.requestId] ? t.approved : t.denied;
      }
      yes.onclick = () => !busy && decide(r.requestId, true, status, mine);
      no.onclick = () => !busy && decide(r.requestId, false, status, mine);
      card.append(yes, no, " ", status);
      add(card);
    }
  };

  // ---- client-side tools ----------------------------------------------------------------------
  const runTool = async (call) => {
    const handler = api.tools.get(call.toolName);
    if (!handler) return { callId: call.callId, errorMessage: `No handler is registered for the tool '${call.toolName}'.` };
    try {
      let args = call.arguments;
      if (typeof args === "string") args = args ? JSON.parse(args) : {};
      const result = await handler(args ?? {});
      JSON.stringify(result); // throws here, not in the request, for what JSON cannot carry
      // A JSON null reads as "no result" on the server: nothing is answered as its JSON text.
      return { callId: call.callId, result: result ?? "null" };
    } catch (e) {
      return { callId: call.callId, errorMessage: String((e && e.message) || e || "The tool failed.") };
    }
  };

  // ---- the turn -------------------------------------------------------------------------------
  /** A tool call's name for people: the frame's displayName, else `get_order_status` → "Get order status". */
  const toolLabel = (f) => {
    if (f.displayName) return String(f.displayName);
    const words = String(f.toolName || "")
      .replace(/([a-z\d])([A-Z])/g, "$1 $2")
      .split(/[\s_.:/-]+/)
      .join(" ")
      .trim()
      .toLowerCase();
    return words.charAt(0).toUpperCase() + words.slice(1);
  };

  /** Reads server-sent events from a fetch response, calling onFrame(event, data). */
  const readEvents = async (res, onFrame) => {
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    const dispatch = (block) => {
      let event = "message";
      const lines = [];
      for (const line of block.split(/\r?\n|\r/)) {
        if (!line || line[0] === ":") continue;
        const i = line.indexOf(":");
        const field = i < 0 ? line : line.slice(0, i);
        let value = i < 0 ? "" : line.slice(i + 1);
        if (value[0] === " ") value = value.slice(1);
        if (field === "event") event = value;
        else if (field === "data") lines.push(value);
      }
      if (lines.length) onFrame(event, lines.join("\n"));
    };
    for (;;) {
      const { done, value } = await reader.read();
      buf += decoder.decode(value, { stream: !done });
      let m;
      while ((m = /\r?\n\r?\n|\r\r/.exec(buf))) {
        dispatch(buf.slice(0, m.index));
        buf = buf.slice(m.index + m[0].length);
      }
      if (done) break;
    }
    if (buf.trim()) dispatch(buf);
  };

  /**
   * One request to the run endpoint, rendered as it streams; follows up with tool results.
   * Resolves to whether the server accepted the request (a stream began).
   */
  async function turn(body) {
    setBusy(true);
    let reply = null;
    let text = "";
    let done = null;
    let approvals = null;
    let failed = false;
    let accepted = false;
    // Until the first token: the typing indicator, and a line per tool call above it.
    const typing = add(el("div", "m typing"));
    typing.setAttribute("role", "status");
    typing.append(el("span", "vh", t.typing), el("i"), el("i"), el("i"));
    const lines = new Map();
    const settle = () => {
      typing.remove();
      for (const line of lines.values()) if (line.getAttribute("role")) line.remove(); // never finished here
    };
    try {
      const res = await fetch(runUrl, {
        method: "POST",
        headers: { Authorization: "Bearer " + apiKey, "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
      if (!res.ok) {
        let detail = "";
        try {
          const problem = await res.json();
          detail = problem.detail || problem.title || (problem.error && problem.error.message) || "";
        } catch {
          /* not JSON */
        }
        failed = true;
        // A refused key is the page's to fix, not the visitor's: the detail goes to the console.
        const refused = res.status === 401 || res.status === 403;
        console.error(
          `Tracon widget: ${runUrl} answered HTTP ${res.status}${detail ? ": " + detail : ""}` +
            (refused ? " (data-api-key must be a tenant API key with the RunsWrite scope)" : ""),
        );
        showError(refused ? t.unavailable : detail || t.failed + " (HTTP " + res.status + ")");
        return false;
      }
      accepted = true;
      await readEvents(res, (event, raw) => {
        let f;
        try {
          f = JSON.parse(raw);
        } catch {
          return;
        }
        if (event === "update" && f.kind === "text" && f.text) {
          if (!reply) {
            settle();
            reply = add(el("div", "m a"));
            reply.setAttribute("aria-busy", "true"); // read out once it is complete
          }
          render(reply, (text += f.text));
          log.scrollTop = log.scrollHeight;
        } else if (event === "update" && f.kind === "toolCall" && !reply) {
          lines.get(f.callId)?.remove();
          const label = toolLabel(f);
          const line = el("div", "tool", label + "…");
          line.dataset.label = label;
          line.setAttribute("role", "status");
          lines.set(f.callId, line);
          log.insertBefore(line, typing);
          log.scrollTop = log.scrollHeight;
        } else if (event === "update" && f.kind === "toolResult" && lines.has(f.callId)) {
          const line = lines.get(f.callId);
          line.removeAttribute("role");
          line.className = f.status === "Succeeded" ? "tool ok" : "tool";
          line.textContent = line.dataset.label || toolLabel(f);
        } else if (event === "approvals" && Array.isArray(f)) {
          approvals = f;
        } else if (event === "done") {
          done = f;
        } else if (event === "error") {
          failed = true;
          showError(f.message);
        }
      });
    } catch (e) {
      failed = true;
      if (accepted) {
        console.error("Tracon widget: the answer's stream broke off.", e);
        showError(t.cut);
      } else {
        // fetch rejects alike for a network failure and a CORS refusal; the browser tells the two
        // apart only in its own console.
        console.error(
          `Tracon widget: ${runUrl} cannot be reached: the network failed, or this page's origin (${location.origin}) is not in the server's Tracon:AllowedOrigins.`,
          e,
        );
        showError(t.unavailable);
      }
    } finally {
      setBusy(false);
      settle();
      reply?.removeAttribute("aria-busy");
      if (!text && done && done.text) reply = say((text = done.text));
      if (text) transcript.push({ r: "a", t: text });
      if (!done && !failed) showError(t.cut);
      if (approvals && approvals.length) {
        const entry = { r: "p", q: approvals, d: {} };
        transcript.push(entry);
        renderApprovals(entry);
      }
      save();
    }
    const calls = done && done.clientToolCalls;
    if (Array.isArray(calls) && calls.length) {
      setBusy(true);
      const toolResults = await Promise.all(calls.map(runTool));
      await turn({ sessionId, toolResults });
    }
    return accepted;
  }

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const message = input.value.trim();
    if (!message || busy) return;
    input.value = "";
    bubble("u", message);
    transcript.push({ r: "u", t: message });
    save();
    const body = { message, sessionId };
    if (data.lang || document.documentElement.lang) body.culture = lang.slice(0, 35);
    turn(body);
  });

  // ---- start ------------------------------------------------------------------------------------
  for (const entry of transcript) {
    if (entry && entry.r === "p" && Array.isArray(entry.q)) renderApprovals(entry);
    else if (entry && entry.r === "a" && typeof entry.t === "string") say(entry.t);
    else if (entry && entry.r === "u" && typeof entry.t === "string") bubble("u", entry.t);
  }
  (document.body || document.documentElement).append(host);
})();
