// The embeddable chat widget (handlers/assets/embed.js) in headless Chromium, against the
// real tracon binary and the mock model server. Started by tests/tests/widget_browser.rs,
// which provides everything through the environment:
//
//   HOST_URL     a host page server whose origin is in Tracon:AllowedOrigins; its pages load
//                the widget from the tracon server (another origin)
//   OTHER_URL    the same pages on an origin that is not
//   MOCK_URL     the mock model server (scripts and recorded requests under /_mock)
//   SCREENSHOT   where to save the screenshot of the open widget
//   CHROMIUM     the browser (default /usr/bin/chromium, Debian's package)
//   SCENARIOS    comma-separated names to run (default: all, in the order below)
//
// A host page is `{HOST_URL}/?agent=NAME[&lang=tr][&dlang=en][&tools=1]`; each scenario
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
    assert.deepEqual(s.errors, ["The assistant cannot be reached right now. Please try again."]);
    assert.deepEqual(s.assistant, []);
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
