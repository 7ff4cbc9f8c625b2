/**
 * leadintake.js: the browser's side of leadintake's retry contract, for lead
 * forms. No dependencies, no build step: import it as an ES module.
 *
 *   import { attachForm } from "https://api.example.com/v1/sdk/leadintake.js";
 *   attachForm(document.querySelector("form"), {
 *     api: "https://api.example.com", publishableKey: "pk_...",
 *   });
 *
 * One enquiry is one Idempotency-Key. The key is made with
 * crypto.randomUUID() and written to localStorage together with the enquiry
 * before the first request leaves, and kept until a final answer: every
 * retry (a network error, 5xx, 408, 429, after a reload) sends the same key
 * and the same body, so the api stores the enquiry once however often it is
 * sent. An enquiry the visitor changes while the earlier one has no final
 * answer is sent under a new key with `Supersedes: <earlier key>`, the
 * contract's explicit recovery for an edit after an uncertain outcome.
 *
 * @module leadintake
 */

/** Name of the progress events, dispatched on the options' target (the form). */
export const PROGRESS_EVENT = "leadintake:progress";

/** The lead fields a form may carry besides source, utm_* and consent. */
const TEXT_FIELDS = ["email", "name", "company", "phone", "website", "message"];

/** A pending enquiry older than this is dropped: the api forgets keys after a week too. */
const PENDING_MAX_AGE = 7 * 24 * 3600 * 1000;

/** Back-off between attempts without a Retry-After: jittered, doubling, capped. */
const BACKOFF_BASE = 1000;
const BACKOFF_MAX = 30000;

/** How many times in a row the browser must refuse the api (CORS) before it counts as final. */
const BLOCKED_STRIKES = 2;

/**
 * @typedef {object} Options
 * @property {string} api Base URL of the leadintake api, e.g. "https://leads.example.com".
 * @property {string} publishableKey The page's publishable key (pk_...).
 * @property {object} [lead] The enquiry (submitLead only): email, source, name, company, phone, website, message, utm, consent.
 * @property {number} [timeout=60000] Milliseconds to keep trying before the outcome is reported unknown.
 * @property {number} [wait=20] Seconds each request asks the api to hold its answer (Prefer: wait).
 * @property {string} [name] Names the pending enquiry in localStorage; one pending enquiry per name. attachForm uses the form's id.
 * @property {EventTarget} [target] Receives the leadintake:progress events.
 * @property {AbortSignal} [signal] Stops trying (the pending enquiry stays stored).
 * @property {string} [source="website"] attachForm: the lead's source when the form has no "source" field.
 * @property {boolean} [reset=true] attachForm: empty the form once the enquiry is completed.
 * @property {Object<string, string|function(object): string>} [messages] attachForm: replaces the texts shown, by state or error code.
 */

/**
 * A final answer: the api's for the enquiry, or its refusal of the request.
 *
 * @typedef {object} Answer
 * @property {"completed"|"failed"|"refused"} status "refused": the api refused the request and stored nothing.
 * @property {string|null} lead_id
 * @property {{code: string, message: string, details?: {field: string, problem: string}[]}} [error]
 * @property {number} httpStatus The status the answer came with.
 * @property {string} key The enquiry's Idempotency-Key.
 * @property {number} [retryAfter] Seconds to wait before sending again (rate_limited).
 */

/**
 * Thrown (as the rejection of submitLead) when no final answer came within
 * the timeout. The enquiry stays stored with its key: sending it again, or
 * reloading the page, resumes it.
 */
export class OutcomeUnknown extends Error {
  /**
   * @param {string} key The enquiry's Idempotency-Key.
   * @param {boolean} saved Whether the api confirmed it has the enquiry.
   * @param {string|null} leadId Its lead id, when saved.
   */
  constructor(key, saved, leadId) {
    super(saved
      ? "the api has the enquiry, but no final answer came in time"
      : "no answer from the api: the enquiry may or may not have arrived");
    this.name = "OutcomeUnknown";
    this.key = key;
    this.saved = saved;
    this.leadId = leadId;
  }
}

/* ---------- the pending enquiry, in localStorage ---------- */

/** Where the pending enquiry of these options lives. */
const storageName = (o) => `leadintake:${o.publishableKey}:${o.name || "enquiry"}`;

/** Storage that is unavailable (disabled, full) degrades to this page's memory. */
const memory = new Map();

function load(o) {
  let text;
  try { text = localStorage.getItem(storageName(o)); } catch { text = memory.get(storageName(o)); }
  try {
    const rec = JSON.parse(text);
    if (rec && rec.v === 1 && Date.now() - rec.at < PENDING_MAX_AGE) return rec;
  } catch { /* nothing stored, or not ours */ }
  return null;
}

function save(o, rec) {
  memory.set(storageName(o), JSON.stringify(rec));
  try { localStorage.setItem(storageName(o), JSON.stringify(rec)); } catch { /* memory only */ }
}

/** Forgets the pending enquiry, unless a newer one (another key) has replaced it. */
function forget(o, key) {
  if (load(o)?.key !== key) return;
  memory.delete(storageName(o));
  try { localStorage.removeItem(storageName(o)); } catch { /* memory only */ }
}

/**
 * Returns the enquiry still waiting for a final answer under these options'
 * name, or null.
 *
 * @param {Options} options
 * @returns {{key: string, lead: object, supersedes: string|null}|null}
 */
export function pendingLead(options) {
  const rec = load(options);
  return rec && { key: rec.key, lead: JSON.parse(rec.body), supersedes: rec.supersedes };
}

/* ---------- submitLead ---------- */

/** The runs of this page, by storage name: a new submission stops the earlier one. */
const running = new Map();

/**
 * Sends one enquiry and keeps at it until a final answer: the promise
 * resolves with the Answer (completed, failed or refused), and rejects with
 * OutcomeUnknown when none came within the timeout (or with the signal's
 * reason when aborted).
 *
 * The same enquiry as the pending one (the same body) is sent again under
 * its key; a different one gets a new key and, while the pending one has no
 * final answer, `Supersedes: <its key>`.
 *
 * Progress is dispatched as leadintake:progress events on options.target,
 * detail {state, key, ...}: "saving" (attempt, resumed), "retrying" (wait in
 * ms, reason: offline, lost, busy, rate_limited), "waiting" (the api has the
 * enquiry; lead_id), "done" and "failed" (answer), "uncertain" (saved).
 *
 * @param {Options} options
 * @returns {Promise<Answer>}
 */
export async function submitLead(options) {
  const o = { timeout: 60000, wait: 20, ...options };
  if (!o.api || !o.publishableKey || !o.lead) throw new TypeError("leadintake: api, publishableKey and lead are required");
  const body = JSON.stringify(o.lead);
  let rec = load(o);
  const resumed = rec?.body === body;
  if (!resumed) {
    rec = { v: 1, key: newKey(), body, supersedes: rec ? rec.key : null, at: Date.now() };
  }
  // Stored before anything is sent: a reload, a crash or a lost answer
  // cannot lose the key.
  save(o, rec);

  const name = storageName(o);
  running.get(name)?.abort();
  const own = new AbortController();
  running.set(name, own);
  const signal = o.signal ? anySignal([o.signal, own.signal]) : own.signal;
  try {
    const answer = await run(o, rec, resumed, signal);
    forget(o, rec.key);
    emit(o, answer.status === "completed" ? "done" : "failed", { key: rec.key, answer });
    return answer;
  } finally {
    if (running.get(name) === own) running.delete(name);
  }
}

/**
 * A new Idempotency-Key: a random UUID. The api refuses keys that look like
 * telephone numbers (digits and separators only), which a UUID can be, once
 * in millions: such a one is drawn again.
 */
function newKey() {
  let key;
  do key = crypto.randomUUID ? crypto.randomUUID() : uuidFromRandomValues();
  while (!/[a-f]/.test(key));
  return key;
}

/** A version 4 UUID, for pages served over plain http, which lack crypto.randomUUID. */
function uuidFromRandomValues() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** The attempts of one enquiry, until a final answer. */
async function run(o, rec, resumed, signal) {
  const api = o.api.replace(/\/+$/, "");
  const deadline = Date.now() + o.timeout;
  let statusUrl = null; // known once the api has the enquiry
  let leadId = null;
  let failures = 0;
  let blocked = 0;

  for (let attempt = 1; ; attempt++) {
    const holdFor = Math.min(o.wait, Math.floor((deadline - Date.now()) / 1000) - 1);
    emit(o, statusUrl ? "waiting" : "saving", { key: rec.key, attempt, resumed, lead_id: leadId });
    const started = Date.now();
    let res;
    try {
      res = statusUrl
        ? await call(o, "GET", statusUrl, null, holdFor, signal)
        : await call(o, "POST", `${api}/v1/leads`, rec, holdFor, signal);
    } catch (err) {
      if (signal.aborted) throw signal.reason;
      // No answer at all. Either the answer was lost on its way, the api is
      // out of reach, or the browser refused to show it (an origin the
      // publishable key does not allow): the status URL tells them apart.
      res = await call(o, "GET", statusUrl || `${api}/v1/operations/${encodeURIComponent(rec.key)}`, null, 0, signal)
        .catch(() => null);
      if (!res && signal.aborted) throw signal.reason;
      if (!res) {
        const reachable = await fetch(`${api}/healthz`, { mode: "no-cors", cache: "no-store", signal }).then(() => true, () => false);
        if (reachable && ++blocked >= BLOCKED_STRIKES) {
          return refused(rec, 0, "origin_not_allowed", "the browser refused the api's answers: this page's origin is not allowed for the publishable key");
        }
        if (!reachable) blocked = 0;
        await pause(o, rec, backoff(++failures), reachable ? "lost" : "offline", deadline, signal, statusUrl, leadId);
        continue;
      }
      blocked = 0;
      // The api answered the status URL: a 404 means the enquiry never
      // arrived, so it is sent again.
      if (!statusUrl && res.status === 404) {
        await pause(o, rec, backoff(++failures), "lost", deadline, signal, statusUrl, leadId);
        continue;
      }
    }
    blocked = 0;
    const body = await res.json().catch(() => null);

    // The api has the enquiry: an operation, or a 202.
    if (res.status === 202 || (res.status === 200 && body && "state" in body)) {
      const final = body.response;
      if (final) return answerOf(rec, final.status, final.body);
      const location = res.headers.get("Location") || body.status_url;
      if (location || !statusUrl) statusUrl = new URL(location || `/v1/operations/${encodeURIComponent(rec.key)}`, `${api}/`).href;
      leadId = body.lead_id;
      failures = 0;
      // A held request came back unfinished; one answered at once (the api
      // does not hold it) is asked again after Retry-After.
      const hint = retryAfter(res) ?? 1;
      const rest = hint * 1000 - (Date.now() - started);
      if (Date.now() >= deadline) throw uncertain(o, rec, true, leadId);
      if (rest > 0) await sleep(Math.min(rest, deadline - Date.now()), signal);
      continue;
    }
    // A final response: stored (completed, failed) or replayed.
    if (body && (body.status === "completed" || body.status === "failed")) {
      return answerOf(rec, res.status, body);
    }
    // The key expired, or the enquiry was erased, while it was polled:
    // send the enquiry again.
    if (statusUrl && res.status === 404) {
      statusUrl = null;
      continue;
    }
    const code = body?.error?.code;
    if (code === "supersedes_unknown") {
      // The earlier enquiry never reached the api (or it expired): there is
      // nothing to supersede, and nothing was stored under this key.
      rec.supersedes = null;
      save(o, rec);
      continue;
    }
    if (res.status === 429 || res.status === 408 || res.status >= 500) {
      const after = retryAfter(res);
      const wait = after != null ? after * 1000 : backoff(++failures);
      if (res.status === 429 && Date.now() + wait > deadline) {
        // Nothing was stored, and waiting is longer than the page waits:
        // the visitor is told when to try again.
        const answer = refused(rec, 429, code, body?.error?.message);
        answer.retryAfter = Math.ceil(wait / 1000);
        return answer;
      }
      await pause(o, rec, wait, res.status === 429 ? "rate_limited" : "busy", deadline, signal, statusUrl, leadId);
      continue;
    }
    // Any other answer refuses the request: nothing was stored.
    return refused(rec, res.status, code, body?.error?.message, body?.error?.details);
  }
}

/** Sends one request to the api, held at most holdFor seconds. */
async function call(o, method, url, rec, holdFor, signal) {
  const headers = { Authorization: `Bearer ${o.publishableKey}` };
  if (holdFor >= 1) headers.Prefer = `wait=${holdFor}`;
  if (rec) {
    headers["Content-Type"] = "application/json";
    headers["Idempotency-Key"] = rec.key;
    if (rec.supersedes) headers.Supersedes = rec.supersedes;
  }
  // A request held longer than it asked for is as good as lost.
  const limit = AbortSignal.timeout((Math.max(holdFor, 0) + 15) * 1000);
  return fetch(url, { method, headers, body: rec ? rec.body : undefined, signal: anySignal([signal, limit]), cache: "no-store" });
}

/** Waits before the next attempt, telling the page; past the deadline, gives up. */
async function pause(o, rec, wait, reason, deadline, signal, statusUrl, leadId) {
  if (Date.now() + wait > deadline) throw uncertain(o, rec, !!statusUrl, leadId);
  emit(o, "retrying", { key: rec.key, wait, reason });
  await sleep(wait, signal);
}

function uncertain(o, rec, saved, leadId) {
  emit(o, "uncertain", { key: rec.key, saved, lead_id: leadId });
  return new OutcomeUnknown(rec.key, saved, leadId);
}

/** The Answer of a final response body. */
function answerOf(rec, httpStatus, body) {
  const answer = { status: body?.status === "completed" ? "completed" : "failed", lead_id: body?.lead_id ?? null, httpStatus, key: rec.key };
  if (body?.error) answer.error = body.error;
  return answer;
}

function refused(rec, httpStatus, code, message, details) {
  const error = { code: code || `http_${httpStatus}`, message: message || "the api refused the request" };
  if (details) error.details = details;
  return { status: "refused", lead_id: null, error, httpStatus, key: rec.key };
}

/** Retry-After in seconds (delta or HTTP date), or null. */
function retryAfter(res) {
  const v = res.headers.get("Retry-After");
  if (!v) return null;
  if (/^\d+$/.test(v.trim())) return Number(v);
  const at = Date.parse(v);
  return Number.isNaN(at) ? null : Math.max(0, Math.ceil((at - Date.now()) / 1000));
}

/** The n-th back-off, in ms: doubling from BACKOFF_BASE, capped, with jitter in [50%, 100%]. */
const backoff = (n) => Math.min(BACKOFF_MAX, BACKOFF_BASE * 2 ** (n - 1)) * (0.5 + Math.random() / 2);

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const done = () => { signal.removeEventListener("abort", stop); resolve(); };
    const timer = setTimeout(done, ms);
    const stop = () => { clearTimeout(timer); reject(signal.reason); };
    signal.addEventListener("abort", stop, { once: true });
  });
}

/** AbortSignal.any, where the browser lacks it. */
function anySignal(signals) {
  if (AbortSignal.any) return AbortSignal.any(signals);
  const ctl = new AbortController();
  for (const s of signals) {
    if (s.aborted) { ctl.abort(s.reason); break; }
    s.addEventListener("abort", () => ctl.abort(s.reason), { once: true });
  }
  return ctl.signal;
}

function emit(o, state, detail) {
  o.target?.dispatchEvent(new CustomEvent(PROGRESS_EVENT, { detail: { state, ...detail } }));
}

/* ---------- attachForm ---------- */

/** What the visitor is told, by state or error code. */
const MESSAGES = {
  saving: (d) => (d.resumed && d.attempt === 1 ? "Sending the enquiry you started earlier…" : "Sending your enquiry…"),
  retrying: (d) => ({
    offline: `We cannot reach our server. Trying again in ${duration(d.wait / 1000)}…`,
    lost: `The connection was interrupted. Trying again in ${duration(d.wait / 1000)}…`,
    rate_limited: `Too many enquiries were sent from your connection. Trying again in ${duration(d.wait / 1000)}…`,
  })[d.reason] ?? `Our server is busy. Trying again in ${duration(d.wait / 1000)}…`,
  waiting: "We have received your enquiry and are finishing up…",
  done: "Thank you! Your enquiry has been sent. We will get back to you soon.",
  uncertain: (d) => (d.saved
    ? "We have received your enquiry; it is still being processed. You may leave this page."
    : "We could not confirm that your enquiry arrived. Please check your connection and press Send again: it will not be sent twice."),
  validation_failed: "Please correct the marked fields. Your enquiry has not been sent yet.",
  rate_limited: (d) => `Too many enquiries were sent from your connection. Your enquiry has not been sent: please try again in ${duration(d.answer.retryAfter)}.`,
  origin_not_allowed: "This form cannot send enquiries from this website, so your enquiry has not been sent. Please contact us another way.",
  unauthorized: "This form is not set up correctly, so your enquiry has not been sent. Please contact us another way.",
  body_too_large: "Your enquiry is too long. Please shorten the message and send it again.",
  crm_rejected: "Sorry, we could not accept your enquiry. Please contact us another way.",
  downstream_unavailable: "Sorry, we could not process your enquiry just now. Please try again later.",
  already_superseded: "This enquiry was already changed in another window.",
  failed: "Sorry, your enquiry could not be sent. Please try again later.",
};
MESSAGES.unknown_field = MESSAGES.validation_failed;
MESSAGES.forbidden_for_publishable_key = MESSAGES.unauthorized;

/** Plainer words than the api's for the fields a visitor most often gets wrong. */
const FIELD_HELP = {
  email: "Please enter one email address, like name@example.com.",
  website: "Please enter a full web address, starting with https://.",
};

/** A wait in words: "12 seconds", "3 minutes", "2 hours". */
function duration(seconds) {
  const s = Math.max(1, Math.round(seconds));
  const n = s < 60 ? s : s < 3540 ? Math.ceil(s / 60) : Math.round(s / 3600);
  const unit = s < 60 ? "second" : s < 3540 ? "minute" : "hour";
  return `${n} ${unit}${n === 1 ? "" : "s"}`;
}

/**
 * Reads a lead from a form: the text fields email, name, company, phone,
 * website and message (trimmed; empty ones left out), source (a field, else
 * options.source, else "website"), consent (a checkbox: checked or not) and
 * utm (fields named utm_*, as {source: ...}). Other fields are ignored.
 *
 * @param {HTMLFormElement} form
 * @param {string} [source="website"]
 * @returns {object}
 */
export function leadFromForm(form, source = "website") {
  const data = new FormData(form);
  const text = (name) => (typeof data.get(name) === "string" ? data.get(name).trim() : "");
  const lead = { email: text("email"), source: text("source") || source };
  for (const name of TEXT_FIELDS.slice(1)) if (text(name)) lead[name] = text(name);
  const utm = {};
  for (const [name, value] of data) if (name.startsWith("utm_") && typeof value === "string" && value) utm[name.slice(4)] = value;
  if (Object.keys(utm).length) lead.utm = utm;
  const consent = form.elements.namedItem("consent");
  if (consent?.type === "checkbox") lead.consent = consent.checked;
  return lead;
}

/** Puts a lead back into the form's fields (a resumed enquiry). */
function fillForm(form, lead) {
  for (const name of [...TEXT_FIELDS, "source"]) {
    const el = form.elements.namedItem(name);
    if (el && "value" in el && el.type !== "hidden") el.value = lead[name] ?? "";
  }
  const consent = form.elements.namedItem("consent");
  if (consent?.type === "checkbox") consent.checked = !!lead.consent;
}

/**
 * Takes over a lead form's submit: reads the lead (leadFromForm), sends it
 * with submitLead, disables the submit buttons meanwhile, and tells the
 * visitor what happens in plain words in a polite live region (the form's
 * [data-leadintake-status] or [aria-live] element, else one it appends).
 * Refused fields are marked aria-invalid and described (aria-describedby)
 * by their error, and the first gets the focus. The form's data-leadintake-state
 * attribute follows the progress (for styling). An enquiry left pending by an
 * earlier visit is put back into the form and resumed at once.
 *
 * @param {HTMLFormElement} form
 * @param {Options} options
 * @returns {{detach: function(): void, submit: function(): Promise<Answer|undefined>}}
 */
export function attachForm(form, options) {
  const o = { ...options, target: options.target ?? form, name: options.name ?? (form.id || form.getAttribute("name") || "enquiry") };
  const messages = { ...MESSAGES, ...o.messages };
  const status = form.querySelector("[data-leadintake-status], [aria-live]") ?? form.appendChild(liveRegion());
  let marked = [];

  const say = (key, detail) => {
    const m = messages[key] ?? messages.failed;
    const text = typeof m === "function" ? m(detail) : m;
    if (status.textContent !== text) status.textContent = text;
  };
  const onProgress = (e) => {
    const d = e.detail;
    form.dataset.leadintakeState = d.state;
    say(d.state === "failed" ? (d.answer.error?.code ?? d.answer.status) : d.state, d);
  };
  o.target.addEventListener(PROGRESS_EVENT, onProgress);

  // Counted: a run stopped by a newer one must not re-enable the buttons.
  let runs = 0;
  const busy = (delta) => {
    const on = (runs += delta) > 0;
    if (on) form.setAttribute("aria-busy", "true"); else form.removeAttribute("aria-busy");
    for (const b of form.querySelectorAll("button:not([type]), button[type=submit], input[type=submit]")) b.disabled = on;
  };

  const send = async (lead) => {
    marked = unmark(marked);
    busy(+1);
    try {
      const answer = await submitLead({ ...o, lead });
      if (answer.error?.details) marked = mark(form, answer.error.details);
      if (answer.status === "completed" && o.reset !== false) form.reset();
      return answer;
    } catch (err) {
      if (!(err instanceof OutcomeUnknown) && err?.name !== "AbortError") {
        form.dataset.leadintakeState = "failed";
        say("failed", {});
      }
    } finally {
      busy(-1);
    }
  };
  const onSubmit = (e) => {
    e.preventDefault();
    if (!form.hasAttribute("aria-busy")) send(leadFromForm(form, o.source));
  };
  form.addEventListener("submit", onSubmit);

  const pending = pendingLead(o);
  if (pending) {
    fillForm(form, pending.lead);
    send(pending.lead);
  }
  return {
    submit: () => send(leadFromForm(form, o.source)),
    detach() {
      form.removeEventListener("submit", onSubmit);
      o.target.removeEventListener(PROGRESS_EVENT, onProgress);
    },
  };
}

function liveRegion() {
  const p = document.createElement("p");
  p.className = "leadintake-status";
  p.setAttribute("role", "status");
  p.setAttribute("aria-live", "polite");
  return p;
}

/** Marks the fields the api refused; returns what to unmark later. */
function mark(form, details) {
  const marked = [];
  for (const { field, problem } of details) {
    const el = form.elements.namedItem(field.startsWith("utm.") ? `utm_${field.slice(4)}` : field);
    if (!(el instanceof HTMLElement)) continue;
    const id = `${el.id || `leadintake-${field.replace(/\W/g, "-")}`}-error`;
    let msg = document.getElementById(id);
    const created = !msg;
    if (created) {
      msg = document.createElement("p");
      msg.id = id;
      msg.className = "leadintake-error";
      el.insertAdjacentElement("afterend", msg);
    }
    msg.textContent = FIELD_HELP[field] ?? (problem ? `${problem[0].toUpperCase()}${problem.slice(1)}.` : "Please check this field.");
    msg.hidden = false;
    el.setAttribute("aria-invalid", "true");
    el.setAttribute("aria-describedby", `${el.getAttribute("aria-describedby") ?? ""} ${id}`.trim());
    marked.push({ el, msg, id, created });
  }
  marked[0]?.el.focus();
  return marked;
}

/** Undoes mark. */
function unmark(marked) {
  for (const { el, msg, id, created } of marked) {
    el.removeAttribute("aria-invalid");
    const rest = (el.getAttribute("aria-describedby") ?? "").split(/\s+/).filter((t) => t && t !== id).join(" ");
    if (rest) el.setAttribute("aria-describedby", rest); else el.removeAttribute("aria-describedby");
    if (created) msg.remove(); else { msg.textContent = ""; msg.hidden = true; }
  }
  return [];
}
