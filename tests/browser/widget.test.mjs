// The embeddable chat widget (handlers/assets/embed.js) in headless Chromium, against the
// real tracon binary and the mock model server. Started by tests/tests/widget_browser.rs,
// which provides everything through the environment:
//
//   HOST_URL     a host page server whose origin is in Tracon:AllowedOrigins; its pages load
//                the widget from the tracon server (another origin)
//   OTHER_URL    the same pages on an origin that is not
//   MOCK_URL     the mock model server (scripts and recorded requests under /_mock)
//   READ_KEY     an API key the run endpoint refuses with 403 (its only scope is RunsRead)
//   SCREENSHOT   where to save the screenshot of the open widget
//   CHROMIUM     the browser (default /usr/bin/chromium, Debian's package)
//   SCENARIOS    comma-separated names to run (default: all, in the order below)
//
// A host page is `{HOST_URL}/?agent=NAME[&lang=tr][&dlang=en][&tools=1][&key=K]`; each scenario
// uses its own agent, whose model (same name as the agent) it scripts here. Every wait is
// for a state, never for a time; a failing scenario saves target/widget-failure-NAME.png.

import assert from "node:assert/strict";
import path from "node:path";
import { chromium } from "playwright-core";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set; tests/tests/widget_browser.rs sets it`);
  return v;
};
const HOST_URL = env("HOST_URL");
const OTHER_URL = env("OTHER_URL");
const MOCK_URL = env("MOCK_URL");
const READ_KEY = env("READ_KEY");
const SCREENSHOT = env("SCREENSHOT");
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const WAIT = 30_000;

// ---- the mock model ----------------------------------------------------------------------

async function script(model, turns) {
  const res = await fetch(`${MOCK_URL}/_mock/scripts/${model}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ turns }),
  });
  assert.equal(res.status, 200, `scripting ${model}: ${await res.text()}`);
}

/** The chat requests the mock received for `model`, oldest first. */
async function requests(model) {
  const res = await fetch(`${MOCK_URL}/_mock/requests/${model}`);
  assert.equal(res.status, 200);
  return res.json();
}

// ---- the page -----------------------------------------------------------------------------

/** Polls `probe` until it returns a truthy value; fails with `what` and the last value. */
async function until(what, probe, timeout = WAIT) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    last = await probe();
    if (last) return last;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** What the widget shows, read inside its (open) shadow root. */
function state(page) {
  return page.evaluate(() => {
    const root = document.querySelector("tracon-widget")?.shadowRoot;
    if (!root) return null;
    const texts = (sel) => [...root.querySelectorAll(sel)].map((n) => n.textContent);
    const launcher = root.querySelector(".launch");
    return {
      expanded: launcher.getAttribute("aria-expanded"),
      launcherLabel: launcher.getAttribute("aria-label"),
      dialogHidden: root.querySelector("[role=dialog]").hidden,
      focused: root.activeElement ? root.activeElement.id || root.activeElement.className : null,
      user: texts(".m.u"),
      assistant: texts(".m.a"),
      errors: texts(".m.e"),
      typing: texts(".typing"),
      tools: texts(".tool"),
      cards: texts(".card"),
      placeholder: root.querySelector("input").placeholder,
      sendLabel: root.querySelector("form button").textContent,
      inputLabel: root.querySelector("label").textContent,
      sending: root.querySelector("form button").disabled,
    };
  });
}

async function newPage(browser, base, query) {
  const context = await browser.newContext({ viewport: { width: 1000, height: 720 } });
  const page = await context.newPage();
  page.errors = [];
  page.logs = [];
  page.on("pageerror", (e) => page.errors.push(String(e)));
  page.on("console", (m) => page.logs.push(`${m.type()}: ${m.text()}`));
  await page.goto(`${base}/?${new URLSearchParams(query)}`);
  await page.locator("tracon-widget .launch").waitFor({ state: "visible", timeout: WAIT });
  return page;
}

async function open(page) {
  await page.locator("tracon-widget .launch").click();
  await page.locator("tracon-widget [role=dialog]").waitFor({ state: "visible", timeout: WAIT });
  // Focus moves to the message input.
  await until("focus on the input", async () => (await state(page)).focused === "i");
}

async function send(page, text) {
  const input = page.locator("tracon-widget input");
  await input.fill(text);
  await input.press("Enter"); // Enter sends
}

/** Waits until the newest assistant bubble reads exactly `text`. */
async function answer(page, text) {
  return until(`the answer "${text}"`, async () => {
    const s = await state(page);
    return s && s.assistant.at(-1) === text && !s.sending && s;
  });
}

const toolMessages = (request) => request.body.messages.filter((m) => m.role === "tool");

const UNAVAILABLE = "The assistant is unavailable right now. Please try again later.";

/** The widget's own console.error lines (not the browser's reports of the failed request). */
const widgetErrors = (page) => page.logs.filter((l) => l.startsWith("error: Tracon widget:"));

/**
 * Records, in order, what happens to the typing indicator, the tool lines and the answer
 * bubble in the message log, as `window.history_`. Read from the mutation records, which keep
 * every state however the frames were batched: a removed text node keeps its text, an
 * attribute record its old value.
 */
function watchLog(page) {
  return page.evaluate(() => {
    const root = document.querySelector("tracon-widget").shadowRoot;
    const log = root.querySelector("[role=log]");
    const h = (window.history_ = []);
    const kind = (n) => n.nodeType === 1 && ["typing", "tool", "a"].find((c) => n.classList.contains(c));
    new MutationObserver((records) => {
      for (const r of records) {
        if (r.type === "attributes" && kind(r.target) === "tool") {
          h.push(`tool ${r.attributeName} was ${r.oldValue}`);
          continue;
        }
        if (kind(r.target) === "tool") {
          for (const n of r.removedNodes) h.push(`tool text was ${n.data}`);
          continue;
        }
        for (const n of r.addedNodes) {
          const k = kind(n);
          if (k === "typing") h.push(`+typing ${n.getAttribute("role")} ${n.textContent} visible=${n.checkVisibility()}`);
          else if (k) h.push(`+${k}`);
        }
        for (const n of r.removedNodes) if (kind(n)) h.push(`-${kind(n)}`);
      }
    }).observe(log, { childList: true, subtree: true, attributes: true, attributeOldValue: true });
  });
}

// ---- scenarios ------------------------------------------------------------------------------

const scenarios = {
  /** (a) A message streams in: the bubble grows delta by delta and ends with the model's text. */
  async stream(browser) {
    const final = "Order 4182 ships tomorrow with DHL.";
    await script("w-stream", [{ text: final, chunkDelayMs: 150 }]);
    const page = await newPage(browser, HOST_URL, { agent: "w-stream" });
    const before = await state(page);
    assert.equal(before.expanded, "false");
    assert.equal(before.dialogHidden, true);
    assert.equal(before.launcherLabel, "Open chat");
    await open(page);
    assert.equal((await state(page)).expanded, "true");
    // Record every text the assistant bubble shows while it streams.
    await page.evaluate(() => {
      const root = document.querySelector("tracon-widget").shadowRoot;
      window.seen = [];
      new MutationObserver(() => {
        const last = [...root.querySelectorAll(".m.a")].at(-1);
        if (last && window.seen.at(-1) !== last.textContent) window.seen.push(last.textContent);
      }).observe(root.querySelector("[role=log]"), { childList: true, subtree: true, characterData: true });
    });
    await send(page, "Where is my order 4182?");
    const s = await answer(page, final);
    assert.deepEqual(s.user, ["Where is my order 4182?"]);
    assert.deepEqual(s.errors, []);
    const seen = await page.evaluate(() => window.seen);
    assert.ok(
      seen.some((t) => t && t.length < final.length && final.startsWith(t)),
      `the answer appeared piece by piece, not at once: ${JSON.stringify(seen)}`,
    );
    const session = await page.evaluate(() => localStorage.getItem("tracon:session:w-stream"));
    assert.match(session, /^[A-Za-z0-9._:-]{1,128}$/);
    const [request] = await requests("w-stream");
    assert.ok(JSON.stringify(request.body.messages).includes("Where is my order 4182?"));
    // Escape closes the panel and focus returns to the launcher.
    await page.locator("tracon-widget input").press("Escape");
    const closed = await until("the panel to close", async () => {
      const st = await state(page);
      return st.dialogHidden && st;
    });
    assert.equal(closed.expanded, "false");
    assert.equal(closed.focused, "launch");
    assert.deepEqual(page.errors, []);
  },

  /** (c) An approval card approves `cancel_order`; the resumed run's answer appears. */
  async approve(browser) {
    await script("w-approve", [
      { toolCalls: [{ name: "cancel_order", arguments: { orderId: "4182" } }] },
      { text: "Order 4182 is cancelled." },
    ]);
    const page = await newPage(browser, HOST_URL, { agent: "w-approve" });
    await open(page);
    await send(page, "Please cancel order 4182");
    const card = page.locator("tracon-widget .card");
    await card.waitFor({ state: "visible", timeout: WAIT });
    const text = await card.textContent();
    assert.ok(text.includes("cancel_order") && text.includes('"orderId": "4182"'), text);
    assert.equal((await requests("w-approve")).length, 1, "the run stopped before the tool ran");
    await card.getByRole("button", { name: "Approve" }).click();
    const s = await answer(page, "Order 4182 is cancelled.");
    assert.ok(s.cards[0].includes("Approved"), s.cards[0]);
    assert.equal(await card.getByRole("button", { name: "Approve" }).isDisabled(), true);
    const last = (await requests("w-approve")).at(-1);
    const results = toolMessages(last).map((m) => m.content);
    assert.ok(results.some((c) => c.includes("cancelled")), `the tool ran after the approval: ${results}`);
    assert.deepEqual(page.errors, []);
  },

  /** (d) A reload shows the conversation again, and the next message continues the session. */
  async reload(browser) {
    await script("w-reload", [{ text: "Nice to meet you, Ada." }, { text: "Your name is Ada." }]);
    const page = await newPage(browser, HOST_URL, { agent: "w-reload" });
    await open(page);
    await send(page, "My name is Ada.");
    await answer(page, "Nice to meet you, Ada.");
    const session = await page.evaluate(() => localStorage.getItem("tracon:session:w-reload"));
    await page.reload();
    await page.locator("tracon-widget .launch").waitFor({ state: "visible", timeout: WAIT });
    await open(page);
    const again = await state(page);
    assert.deepEqual(again.user, ["My name is Ada."]);
    assert.deepEqual(again.assistant, ["Nice to meet you, Ada."]);
    await send(page, "What is my name?");
    const s = await answer(page, "Your name is Ada.");
    assert.deepEqual(s.user, ["My name is Ada.", "What is my name?"]);
    assert.equal(await page.evaluate(() => localStorage.getItem("tracon:session:w-reload")), session);
    // The model saw the earlier turn: the session carried it.
    const second = (await requests("w-reload")).at(-1);
    const history = JSON.stringify(second.body.messages);
    assert.ok(history.includes("My name is Ada.") && history.includes("Nice to meet you, Ada."), history);
    assert.deepEqual(page.errors, []);
  },

  /** (e) A page on an origin that is not allowed: the browser refuses the answer, the widget says so. */
  async cors(browser) {
    await script("w-cors", [{ text: "This must never be asked." }]);
    const page = await newPage(browser, OTHER_URL, { agent: "w-cors" });
    await open(page);
    await send(page, "Hello from a foreign origin");
    const s = await until("the widget's error", async () => {
      const st = await state(page);
      return st.errors.length && !st.sending && st;
    });
    assert.deepEqual(s.errors, [UNAVAILABLE]);
    assert.deepEqual(s.assistant, []);
    assert.deepEqual(s.typing, [], "the typing indicator went with the failure");
    // The reason is for the page's developer: in the console, not in the chat.
    const logged = widgetErrors(page);
    assert.equal(logged.length, 1, JSON.stringify(page.logs));
    assert.ok(logged[0].includes(OTHER_URL) && logged[0].includes("Tracon:AllowedOrigins"), logged[0]);
    assert.deepEqual(await requests("w-cors"), [], "no run reached the model");
    assert.deepEqual(page.errors, []);
  },

  /** Refusals read as the server's words: a problem document's detail, an `error` frame's message. */
  async errors(browser) {
    const missing = await newPage(browser, HOST_URL, { agent: "w-missing" });
    await open(missing);
    await send(missing, "Hello?");
    const refused = await until("the problem's detail", async () => {
      const st = await state(missing);
      return st.errors.length && !st.sending && st;
    });
    assert.deepEqual(refused.errors, ["No agent named 'w-missing' exists."]);
    await script("w-fail", [{ status: 400 }]);
    const page = await newPage(browser, HOST_URL, { agent: "w-fail" });
    await open(page);
    await send(page, "Hello?");
    const failed = await until("the error frame's message", async () => {
      const st = await state(page);
      return st.errors.length && !st.sending && st;
    });
    assert.equal(failed.errors.length, 1, JSON.stringify(failed.errors));
    assert.match(failed.errors[0], /\(ref: [^)]+\)/, "the run's own failure message, with its log reference");
    assert.deepEqual(page.errors, []);
  },

  /**
   * The widget feels alive: a typing indicator from the send until the first token, and the
   * model's server-side tool call as a status line under its display name ("Looking up the order…") that its result
   * settles ("✓ Looking up the order") before the answer streams in.
   */
  async alive(browser) {
    await script("w-alive", [
      { toolCalls: [{ name: "get_order_status", arguments: { orderId: "4182" } }] },
      { text: "Order 4182 is on its way.", chunkDelayMs: 30 },
    ]);
    const page = await newPage(browser, HOST_URL, { agent: "w-alive" });
    await open(page);
    await watchLog(page);
    await send(page, "Where is order 4182?");
    const s = await answer(page, "Order 4182 is on its way.");
    const history = await page.evaluate(() => window.history_);
    const at = (entry) => {
      const i = history.indexOf(entry);
      assert.ok(i >= 0, `${entry} in ${JSON.stringify(history, null, 1)}`);
      return i;
    };
    const shown = at("+typing status The assistant is typing… visible=true");
    const line = at("+tool");
    const running = at("tool text was Looking up the order…");
    at("tool role was status");
    const gone = at("-typing");
    const first = at("+a");
    assert.ok(shown < line && line < running && running < gone && gone < first, JSON.stringify(history, null, 1));
    assert.equal(history.filter((e) => e.startsWith("+typing")).length, 1);
    assert.equal(history.filter((e) => e === "-typing").length, 1, "removed once, at the first token");
    // Settled: no indicator left, the tool line kept as a done line without its live role.
    assert.deepEqual(s.typing, []);
    assert.deepEqual(s.tools, ["Looking up the order"]);
    const settled = await page.evaluate(() => {
      const n = document.querySelector("tracon-widget").shadowRoot.querySelector(".tool");
      return { cls: n.className, role: n.getAttribute("role") };
    });
    assert.deepEqual(settled, { cls: "tool ok", role: null });
    // The tool really ran on the server, and its result reached the model.
    const last = (await requests("w-alive")).at(-1);
    assert.ok(toolMessages(last).some((m) => m.content.includes("4182")), JSON.stringify(toolMessages(last)));
    assert.deepEqual(s.errors, []);
    assert.deepEqual(page.errors, []);
  },

  /**
   * Markdown renders as DOM (a list, emphasis, code, a fenced block, a link that opens safely)
   * while HTML, scripts and javascript: links in the same answer stay inert text, live and
   * after a reload.
   */
  async markdown(browser) {
    const text = [
      "Your **order 4182** has *two* parcels:",
      "",
      "- Parcel `A-1`: delivered",
      "- Parcel `A-2`: [track it](https://tracking.example/4182?p=2)",
      "",
      "```",
      "curl https://tracking.example/4182",
      "```",
      "",
      'Ignore these: <img src=x onerror="window.pwned=1"> <script>window.pwned=2</script> ' +
        "[x](javascript:alert(1)) [y](javascript:window.pwned=3) " +
        '<a href="javascript:window.pwned=4" onclick="window.pwned=5">z</a> <svg onload="window.pwned=6"></svg>',
    ].join("\n");
    await script("w-markdown", [{ text }]);
    const page = await newPage(browser, HOST_URL, { agent: "w-markdown" });
    const dialogs = [];
    page.on("dialog", (d) => {
      dialogs.push(d.message());
      d.dismiss().catch(() => {});
    });
    await open(page);
    await send(page, "Where are my parcels?");
    const rendered = () =>
      page.evaluate(() => {
        const root = document.querySelector("tracon-widget").shadowRoot;
        const log = root.querySelector("[role=log]");
        const bubble = [...log.querySelectorAll(".m.a")].at(-1);
        if (!bubble) return null;
        const all = (sel) => [...bubble.querySelectorAll(sel)];
        return {
          strong: all("strong").map((n) => n.textContent),
          em: all("em").map((n) => n.textContent),
          items: all("ul > li").map((n) => n.textContent),
          code: all("li > code").map((n) => n.textContent),
          block: all("pre > code").map((n) => n.textContent),
          links: all("a").map((a) => ({
            text: a.textContent,
            href: a.getAttribute("href"),
            target: a.getAttribute("target"),
            rel: a.getAttribute("rel"),
          })),
          last: all("p").at(-1)?.textContent,
          // Anything the payloads would have needed, anywhere in the message log.
          dangerous: [...log.querySelectorAll("img, script, svg, iframe, object, embed, style, form")].map((n) => n.tagName),
          handlers: [...log.querySelectorAll("*")].flatMap((n) =>
            [...n.attributes].filter((a) => /^on/i.test(a.name) || /javascript:/i.test(a.value)).map((a) => a.name),
          ),
          pwned: window.pwned,
          sending: root.querySelector("form button").disabled,
        };
      });
    const check = async (when) => {
      const r = await until(`the rendered answer (${when})`, async () => {
        const got = await rendered();
        return got && !got.sending && got.last?.endsWith("</svg>") && got;
      });
      assert.deepEqual(r.strong, ["order 4182"], when);
      assert.deepEqual(r.em, ["two"], when);
      assert.deepEqual(r.items, ["Parcel A-1: delivered", "Parcel A-2: track it"], when);
      assert.deepEqual(r.code, ["A-1", "A-2"], when);
      assert.deepEqual(r.block, ["curl https://tracking.example/4182"], when);
      assert.deepEqual(
        r.links,
        [{ text: "track it", href: "https://tracking.example/4182?p=2", target: "_blank", rel: "noopener noreferrer" }],
        when,
      );
      // The injection attempts are shown as the text they are, and nothing of them runs.
      assert.equal(
        r.last,
        'Ignore these: <img src=x onerror="window.pwned=1"> <script>window.pwned=2</script> ' +
          "[x](javascript:alert(1)) [y](javascript:window.pwned=3) " +
          '<a href="javascript:window.pwned=4" onclick="window.pwned=5">z</a> <svg onload="window.pwned=6"></svg>',
        when,
      );
      assert.deepEqual(r.dangerous, [], when);
      assert.deepEqual(r.handlers, [], when);
      assert.equal(r.pwned, undefined, when);
    };
    await check("streamed");
    await page.reload();
    await page.locator("tracon-widget .launch").waitFor({ state: "visible", timeout: WAIT });
    await open(page);
    await check("after a reload, from the stored transcript");
    // Clicking the javascript: text does nothing either.
    await page.locator("tracon-widget .m.a p").last().click();
    assert.equal(await page.evaluate(() => window.pwned), undefined);
    assert.deepEqual(dialogs, []);
    assert.deepEqual(page.errors, []);
  },

  /**
   * A key the server refuses (unknown: 401; without RunsWrite: 403) reads as "unavailable" in
   * the chat; the status and the server's reason go to the console for the page's developer.
   */
  async auth(browser) {
    await script("w-auth", [{ text: "This must never be asked." }]);
    for (const [key, status] of [
      ["trk_not-a-key-this-server-issued", 401],
      [READ_KEY, 403],
    ]) {
      const page = await newPage(browser, HOST_URL, { agent: "w-auth", key });
      await open(page);
      await send(page, "Hello?");
      const s = await until(`the friendly error (${status})`, async () => {
        const st = await state(page);
        return st.errors.length && !st.sending && st;
      });
      assert.deepEqual(s.errors, [UNAVAILABLE], `${status}`);
      assert.deepEqual(s.assistant, []);
      assert.deepEqual(s.typing, []);
      const logged = widgetErrors(page);
      assert.equal(logged.length, 1, JSON.stringify(page.logs));
      assert.ok(logged[0].includes(`HTTP ${status}: `), `the status and the server's reason: ${logged[0]}`);
      assert.ok(logged[0].includes("RunsWrite"), logged[0]);
      assert.ok(!logged[0].includes(key), "the key itself is not logged");
      assert.deepEqual(page.errors, []);
    }
    assert.deepEqual(await requests("w-auth"), [], "no run reached the model");
  },

  /**
   * Roles and names as assistive technology reads them, and the keyboard: Enter on the
   * launcher opens the panel on the input, Shift+Tab walks back through the log to the close
   * button, a pending answer is a "status", Escape closes and focus returns to the launcher.
   */
  async a11y(browser) {
    await script("w-a11y", [{ text: "Hello! How can I help?" }, { hang: true }]);
    const page = await newPage(browser, HOST_URL, { agent: "w-a11y" });
    await page.locator("tracon-widget .launch").focus();
    await page.keyboard.press("Enter");
    await until("focus on the input", async () => (await state(page)).focused === "i");
    await send(page, "Hi");
    await answer(page, "Hello! How can I help?");
    const focus = async () => (await state(page)).focused;
    await page.keyboard.press("Tab");
    assert.equal(
      await page.evaluate(() => document.querySelector("tracon-widget").shadowRoot.activeElement?.textContent),
      "Send",
      "Tab goes on from the input to the send button",
    );
    await page.keyboard.press("Shift+Tab");
    assert.equal(await focus(), "i");
    await page.keyboard.press("Shift+Tab");
    assert.equal(await focus(), "log", "the scrollable log takes focus, for the keyboard to scroll it");
    await page.keyboard.press("Shift+Tab");
    assert.equal(await focus(), "x");
    await page.locator("tracon-widget input").focus();
    // A second question the model never answers: the typing indicator stays, as a status.
    await send(page, "Are you there?");
    await until("the typing indicator", async () => (await state(page)).typing.length === 1);
    const tree = await page.locator("tracon-widget").ariaSnapshot();
    for (const line of [
      /^- button "Open chat" \[expanded\]$/m,
      /^- dialog "Chat":$/m,
      /^ +- heading "Chat" \[level=2\]$/m,
      /^ +- button "Close chat"/m,
      /^ +- log "Messages":$/m,
      /^ +- text: Hi$/m,
      /^ +- paragraph: Hello! How can I help\?$/m,
      /^ +- text: Are you there\?$/m,
      /^ +- status: The assistant is typing…$/m,
      /^ +- textbox "Message"/m,
      /^ +- button "Send" \[disabled\]$/m,
    ]) {
      assert.match(tree, line, tree);
    }
    const log = await page.evaluate(() => {
      const n = document.querySelector("tracon-widget").shadowRoot.querySelector(".log");
      return { live: n.getAttribute("aria-live"), role: n.getAttribute("role") };
    });
    assert.deepEqual(log, { live: "polite", role: "log" });
    await page.keyboard.press("Escape");
    const closed = await until("the panel to close", async () => {
      const st = await state(page);
      return st.dialogHidden && st;
    });
    assert.equal(closed.focused, "launch");
    assert.deepEqual(page.errors, []);
  },

  /** Turkish strings from <html lang>, and data-lang winning over it. */
  async language(browser) {
    const tr = await newPage(browser, HOST_URL, { agent: "w-stream", lang: "tr-TR" });
    const s = await state(tr);
    assert.equal(s.launcherLabel, "Sohbeti aç");
    assert.equal(s.sendLabel, "Gönder");
    assert.equal(s.inputLabel, "Mesaj");
    const en = await newPage(browser, HOST_URL, { agent: "w-stream", lang: "tr", dlang: "en" });
    assert.equal((await state(en)).sendLabel, "Send");
  },

  /** (f) A screenshot of the open widget with a conversation, over a hostile host stylesheet. */
  async screenshot(browser) {
    await script("w-shot", [
      { toolCalls: [{ name: "cancel_order", arguments: { orderId: "4182" } }] },
      { text: "Order 4182 is cancelled." },
    ]);
    const page = await newPage(browser, HOST_URL, { agent: "w-shot" });
    await open(page);
    await send(page, "Please cancel order 4182");
    const card = page.locator("tracon-widget .card");
    await card.waitFor({ state: "visible", timeout: WAIT });
    await card.getByRole("button", { name: "Approve" }).click();
    await answer(page, "Order 4182 is cancelled.");
    await page.locator("tracon-widget input").focus();
    await page.screenshot({ path: SCREENSHOT });
    console.log(`screenshot: ${path.resolve(SCREENSHOT)}`);
  },

  /**
   * (b) Client-side tools: the model calls three tools the server declares as client-side;
   * the page implements one before the script loads (the queue) and one after (throwing),
   * the third not at all. Every call is answered and the results reach the model.
   */
  async tool(browser) {
    await script("w-tool", [
      {
        toolCalls: [
          { name: "get_local_time", arguments: {} },
          { name: "get_cart", arguments: { currency: "EUR" } },
          { name: "get_coupon", arguments: {} },
        ],
      },
      { text: "It is 09:30 where you are." },
    ]);
    const page = await newPage(browser, HOST_URL, { agent: "w-tool", tools: "1" });
    await page.evaluate(() =>
      window.TraconWidget.registerTool("get_cart", (args) => {
        window.cartArgs = args;
        throw new Error("The cart service is down.");
      }),
    );
    await open(page);
    await send(page, "What time is it for me?");
    const s = await answer(page, "It is 09:30 where you are.");
    assert.deepEqual(s.errors, []);
    assert.deepEqual(await page.evaluate(() => window.cartArgs), { currency: "EUR" });
    const all = await requests("w-tool");
    assert.equal(all.length, 2, "one model call, then one more with the page's results");
    const results = Object.fromEntries(toolMessages(all[1]).map((m) => [m.tool_call_id, m.content]));
    const byName = Object.fromEntries(
      all[1].body.messages
        .flatMap((m) => m.tool_calls || [])
        .map((c) => [c.function.name, results[c.id]]),
    );
    assert.ok(byName.get_local_time.includes("2031-05-04T09:30:00+03:00"), JSON.stringify(byName));
    assert.ok(byName.get_cart.includes("The cart service is down."), JSON.stringify(byName));
    assert.ok(byName.get_coupon.includes("No handler is registered for the tool 'get_coupon'."), JSON.stringify(byName));
    assert.deepEqual(page.errors, []);
  },
};

// ---- run --------------------------------------------------------------------------------------

const chosen = (process.env.SCENARIOS || Object.keys(scenarios).join(",")).split(",").filter(Boolean);
for (const name of chosen) if (!scenarios[name]) throw new Error(`unknown scenario ${name}`);

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  headless: true,
  timeout: 120_000,
  // playwright-core gives every launch a fresh temporary profile (user-data-dir).
  args: [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
  ],
});
let failed = 0;
try {
  for (const name of chosen) {
    const contexts = new Set(browser.contexts());
    try {
      await scenarios[name](browser);
      console.log(`ok - ${name}`);
    } catch (e) {
      failed++;
      console.log(`not ok - ${name}\n${e && e.stack ? e.stack : e}`);
      for (const context of browser.contexts().filter((c) => !contexts.has(c))) {
        for (const page of context.pages()) {
          const shot = path.resolve(path.dirname(SCREENSHOT), `widget-failure-${name}.png`);
          await page.screenshot({ path: shot }).catch(() => {});
          console.log(`  page ${page.url()} (screenshot ${shot})`);
          for (const line of [...(page.errors || []), ...(page.logs || [])]) console.log(`  ${line}`);
        }
      }
    } finally {
      for (const context of browser.contexts().filter((c) => !contexts.has(c))) await context.close();
    }
  }
} finally {
  await browser.close();
}
console.log(`browser scenarios: ${chosen.length - failed} ok, ${failed} not ok`);
process.exit(failed ? 1 : 0);
