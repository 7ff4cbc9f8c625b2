/**
 * leadintake.js: the browser's side of leadintake's retry contract, for lead
 * forms; an ES module without dependencies. leadintake.d.ts documents its
 * API; the comments here say how it works.
 *
 * One enquiry is one Idempotency-Key, stored in localStorage with the body
 * before the first request leaves, so that every retry (network errors,
 * 5xx, 408, 429, a reload, an api out of reach) sends the same key and
 * bytes; once the api has acknowledged it, only the key stays. An edit of
 * an enquiry without a final answer goes under a new key, with Supersedes.
 * Each enquiry carries its attribution: the first touch and this page.
 *
 * @module leadintake
 */

/** Name of the progress events, dispatched on the options' target (the form). */
export const PROGRESS_EVENT = "leadintake:progress";

/** The lead's members a form may carry as text, besides source, utm_* and consent. */
const TEXT_FIELDS = ["email", "name", "company", "phone", "website", "message"];

/** The hidden fields in which captcha widgets (Turnstile, hCaptcha, reCAPTCHA) leave their token. */
const CAPTCHA_FIELDS = ["cf-turnstile-response", "h-captcha-response", "g-recaptcha-response"];

/** A stored enquiry older than this is deleted: the api forgets keys after a week too. */
const PENDING_MAX_AGE = 7 * 24 * 3600 * 1000;

/** Back-off between attempts without a Retry-After: jittered, doubling, capped. */
const BACKOFF_BASE = 1000;
const BACKOFF_MAX = 30000;

/** How many times in a row the browser must refuse the api (CORS) before it counts as final. */
const BLOCKED_STRIKES = 2;

/** Where this module was loaded from: the api, unless the site hosts its own copy. */
const MODULE_ORIGIN = new URL(import.meta.url).origin;

/**
 * @typedef {object} Lead
 * @property {string} email
 * @property {string} source
 * @property {string|null} [name]
 * @property {string|null} [company]
 * @property {string|null} [phone]
 * @property {string|null} [website]
 * @property {string|null} [message]
 * @property {Record<string, string>|null} [utm]
 * @property {boolean|null} [consent]
 * @property {Record<string, string>|null} [fields]
 * @property {{first?: Touch|null, last?: Touch|null}|null} [attribution]
 */

/**
 * @typedef {object} Touch
 * @property {string|null} [landing_page]
 * @property {string|null} [referrer]
 * @property {Record<string, string>|null} [utm]
 * @property {{gclid?: string|null, fbclid?: string|null, msclkid?: string|null}|null} [click_ids]
 * @property {string|null} [at]
 */

/** @typedef {"email"|"source"|"name"|"company"|"phone"|"website"|"message"|"consent"} LeadMember */

/** @typedef {string | ((detail: any) => string)} Message */

/**
 * @typedef {object} Options
 * @property {string} [api]
 * @property {string} publishableKey
 * @property {Lead} [lead]
 * @property {number} [timeout]
 * @property {number} [wait]
 * @property {string} [name]
 * @property {EventTarget} [target]
 * @property {AbortSignal} [signal]
 * @property {number} [shownAt]
 * @property {boolean|(() => boolean)} [honeypot]
 * @property {string|(() => string)} [captcha]
 * @property {string} [source]
 * @property {Partial<Record<LeadMember, string>>} [map]
 * @property {boolean} [reset]
 * @property {Record<string, Message>} [messages]
 * @property {boolean} [attribution]
 */

/**
 * @typedef {object} Answer
 * @property {"completed"|"received"|"failed"|"refused"} status
 * @property {string|null} lead_id
 * @property {{code: string, message: string, details?: {field: string, problem: string}[]}} [error]
 * @property {number} httpStatus
 * @property {string} key
 * @property {number} [retryAfter]
 */

/** No final answer within the timeout: the enquiry stays stored with its key. */
export class OutcomeUnknown extends Error {
  /**
   * @param {string} key
   * @param {boolean} saved
   * @param {string|null} leadId
   */
  constructor(key, saved, leadId) {
    super(saved
      ? "the api has the enquiry, but no final answer came in time"
      : "no answer from the api: the enquiry may or may not have arrived");
    this.name = "OutcomeUnknown";
    this.key = key;
    this.saved = saved;
    /** @type {string|null} */
    this.leadId = leadId;
  }
}

/* ---------- the stored enquiry, in localStorage ---------- */

/*
 * One record per name: {v: 1, key, at, supersedes, body, shown} until the
 * api has acknowledged the enquiry (a retry must send the same bytes), then
 * {v: 1, key, at, acked: true}: the key to poll and to supersede, never the
 * enquiry itself, which the page holds in memory while it lives. A final
 * answer removes the record.
 */

const PREFIX = "leadintake:";

/** Where the enquiry of these options lives. */
const storageName = (o) => `${PREFIX}${o.publishableKey}:${o.name || "enquiry"}`;

/** Storage that is unavailable (disabled, full) degrades to this page's memory. */
const memory = new Map();

/** The bodies of the enquiries this page sent and the api acknowledged, by key. */
const sentBodies = new Map();

const fresh = (rec) => Date.now() - rec.at < PENDING_MAX_AGE;

function load(o) {
  let text;
  try { text = localStorage.getItem(storageName(o)); } catch { text = memory.get(storageName(o)); }
  try {
    const rec = JSON.parse(text);
    if (rec && rec.v === 1 && fresh(rec) && typeof rec.key === "string") return rec;
  } catch { /* nothing stored, or not ours */ }
  return null;
}

function save(o, rec) {
  memory.set(storageName(o), JSON.stringify(rec));
  try { localStorage.setItem(storageName(o), JSON.stringify(rec)); } catch { /* memory only */ }
}

/** Forgets the enquiry, unless a newer one (another key) has replaced it. */
function forget(o, key) {
  sentBodies.delete(key);
  if (load(o)?.key !== key) return;
  memory.delete(storageName(o));
  try { localStorage.removeItem(storageName(o)); } catch { /* memory only */ }
}

/** Records older than a week are deleted when the module loads, whoever left them. */
try {
  for (let i = localStorage.length - 1; i >= 0; i--) {
    const name = localStorage.key(i);
    if (!name?.startsWith(PREFIX)) continue;
    let rec = null;
    try { rec = JSON.parse(localStorage.getItem(name)); } catch { /* not a record */ }
    if (!(rec?.at && fresh(rec))) localStorage.removeItem(name);
  }
} catch { /* no storage */ }

/* ---------- attribution: where the visitor came from ---------- */

const CLICK_IDS = ["gclid", "fbclid", "msclkid"];

/** The first touch's record, kept 90 days: outside PREFIX, whose records go after a week. */
const TOUCH = "leadintake-first-touch";
const TOUCH_MAX_AGE = 90 * 24 * 3600 * 1000;

/** A URL without fragment, nor query but utm_* and the click ids; "" unless http(s) and at most 2048 long. */
function bare(href) {
  try {
    const u = new URL(href);
    u.hash = "";
    for (const k of [...u.searchParams.keys()]) if (!k.startsWith("utm_") && !CLICK_IDS.includes(k)) u.searchParams.delete(k);
    return /^https?:$/.test(u.protocol) && u.href.length <= 2048 ? u.href : "";
  } catch {
    return "";
  }
}

const site = (url) => new URL(url).hostname.replace(/^www\./, "");

/** This page's touch. What the api would refuse (too long, U+0000) is left out, not the enquiry. */
function pageTouch() {
  const utm = Object.create(null), ids = Object.create(null), ref = bare(document.referrer);
  const t = { landing_page: bare(location.href) || undefined, referrer: ref && site(ref) !== site(location.href) ? ref : undefined };
  for (const [k, v] of new URLSearchParams(location.search)) {
    if (!v || /\0/.test(k + v)) continue;
    if (k.startsWith("utm_") && !(k.slice(4) in utm) && v.length <= 200 && Object.keys(utm).length < 20) utm[k.slice(4)] = v;
    if (CLICK_IDS.includes(k) && !(k in ids) && v.length <= 512) ids[k] = v;
  }
  if (Object.keys(utm).length) t.utm = utm;
  if (Object.keys(ids).length) t.click_ids = ids;
  t.at = new Date(performance.timeOrigin).toISOString();
  return t;
}

/** The stored first touch, if younger than 90 days; else this page's, stored, if it came from a campaign, a click or another site. */
function firstTouch() {
  let t;
  try {
    t = JSON.parse(localStorage.getItem(TOUCH));
    if (Date.now() - Date.parse(t.at) < TOUCH_MAX_AGE) return t;
  } catch { /* none */ }
  t = pageTouch();
  t = t.referrer || t.utm || t.click_ids ? t : null;
  try {
    if (t) localStorage.setItem(TOUCH, JSON.stringify(t));
    else localStorage.removeItem(TOUCH);
  } catch { /* this page only */ }
  return t;
}

/** Whether a call of this page said attribution: false: then nothing is recorded. */
let untouched = false;

function noTouch() {
  untouched = true;
  try { localStorage.removeItem(TOUCH); } catch { /* none */ }
}

/* A page records its touch once loaded (after its own call with attribution: false), or as the visitor leaves. */
try {
  const record = () => untouched || firstTouch();
  if (document.readyState === "complete") setTimeout(record);
  else addEventListener("load", record);
  addEventListener("pagehide", record);
} catch { /* no page */ }

/**
 * @typedef {object} Pending
 * @property {string} key
 * @property {Lead|null} lead
 * @property {string|null} supersedes
 * @property {boolean} acknowledged
 */

/**
 * The enquiry stored under these options' name; its lead is null once the
 * api has it and the page that sent it is gone.
 *
 * @param {Options} options
 * @returns {Pending|null}
 */
export function pendingLead(options) {
  const rec = load(options);
  if (!rec) return null;
  const body = rec.body ?? sentBodies.get(rec.key);
  return { key: rec.key, lead: body ? JSON.parse(body) : null, supersedes: rec.supersedes ?? null, acknowledged: !!rec.acked };
}

/* ---------- submitLead ---------- */

/** The runs of this page, by storage name: a new submission stops the earlier one. */
const running = new Map();

/** The waits between attempts: back online, each ends at once. */
const waits = new Set();
globalThis.addEventListener?.("online", () => {
  for (const wake of [...waits]) wake();
});

/**
 * Sends one enquiry until a final answer. The same enquiry as the stored
 * one goes again under its key (or is polled); another gets a new key and
 * Supersedes the stored one while it has no final answer.
 *
 * @param {Options} options
 * @returns {Promise<Answer>}
 */
export async function submitLead(options) {
  const o = optionsOf(options);
  let lead = o.lead;
  if (!lead) throw new TypeError("leadintake: lead is required");
  if (o.attribution === false) noTouch();
  else if (lead.attribution === undefined) lead = { ...lead, attribution: { first: firstTouch() ?? undefined, last: pageTouch() } };
  let body = JSON.stringify(lead);
  let rec = load(o);
  const sent = rec && (rec.body ?? sentBodies.get(rec.key));
  // The same enquiry whatever its attribution, which is fixed once stored:
  // it goes again with the stored bytes.
  const resumed = !!sent && strip(sent) === strip(body);
  if (resumed) body = sent;
  else {
    rec = { v: 1, key: newKey(), at: Date.now(), supersedes: rec ? rec.key : null, body, shown: o.shownAt };
    // Stored before anything is sent: a reload, a crash or a lost answer
    // cannot lose the key.
    save(o, rec);
  }
  return start(o, rec, resumed, body);
}

/** A body without its attribution. */
function strip(body) {
  try {
    const lead = JSON.parse(body);
    delete lead.attribution;
    return JSON.stringify(lead);
  } catch {
    return body;
  }
}

/**
 * Resumes the stored enquiry, as submitLead would; null when none is stored.
 *
 * @param {Options} options
 * @returns {Promise<Answer>|null}
 */
export function resumeLead(options) {
  const o = optionsOf(options);
  const rec = load(o);
  return rec && start(o, rec, true, rec.body ?? sentBodies.get(rec.key) ?? null);
}

/** Options with their defaults; the api and the key are required. */
function optionsOf(options) {
  const o = { timeout: 60000, wait: 20, api: MODULE_ORIGIN, shownAt: performance.timeOrigin, ...options };
  if (!o.api || !o.publishableKey) throw new TypeError("leadintake: api and publishableKey are required");
  return o;
}

/** Runs an enquiry to its final answer; a newer run of the same name stops it. */
async function start(o, rec, resumed, body) {
  const name = storageName(o);
  running.get(name)?.abort();
  const own = new AbortController();
  running.set(name, own);
  const signal = o.signal ? anySignal([o.signal, own.signal]) : own.signal;
  try {
    const answer = await run(o, rec, resumed, body, signal);
    forget(o, rec.key);
    emit(o, answer.status === "failed" || answer.status === "refused" ? "failed" : "done", { key: rec.key, answer });
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

/**
 * The attempts of one enquiry, until a final answer. body is null for an
 * enquiry the api acknowledged before this page: it can only be polled.
 */
async function run(o, rec, resumed, body, signal) {
  const api = o.api.replace(/\/+$/, "");
  const deadline = Date.now() + o.timeout;
  const opUrl = `${api}/v1/operations/${encodeURIComponent(rec.key)}`;
  let statusUrl = rec.acked ? opUrl : null; // known once the api has the enquiry
  let leadId = null;
  let failures = 0;
  let blocked = 0;
  // The api has the enquiry: from now on only the key is kept.
  const acknowledged = () => {
    if (rec.acked) return;
    sentBodies.set(rec.key, body);
    rec = { v: 1, key: rec.key, at: rec.at, acked: true };
    save(o, rec);
  };

  for (let attempt = 1; ; attempt++) {
    const holdFor = Math.min(o.wait, Math.floor((deadline - Date.now()) / 1000) - 1);
    emit(o, statusUrl ? "waiting" : "saving", { key: rec.key, attempt, resumed, lead_id: leadId });
    const started = Date.now();
    let res;
    try {
      res = statusUrl
        ? await call(o, "GET", statusUrl, null, holdFor, signal)
        : await call(o, "POST", `${api}/v1/leads`, rec, holdFor, signal, body);
    } catch (err) {
      if (signal.aborted) throw signal.reason;
      // No answer to read: lost on its way, the api out of reach (a load
      // balancer's 502 without CORS headers looks the same), or refused by
      // the browser (an origin the key does not allow). The status URL
      // tells a lost answer; /healthz a refusal (the api answers) from an
      // api out of reach. Only a refusal is final.
      res = await call(o, "GET", statusUrl || opUrl, null, 0, signal).catch(() => null);
      if (!res && signal.aborted) throw signal.reason;
      if (!res) {
        const answers = await apiAnswers(api, signal);
        if (answers && ++blocked >= BLOCKED_STRIKES) {
          return refused(rec, 0, "origin_not_allowed", "the browser refused the api's answers: this page's origin is not allowed for the publishable key");
        }
        if (!answers) blocked = 0;
        await pause(o, rec, backoff(++failures), answers ? "lost" : "offline", deadline, signal, statusUrl, leadId);
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
    const answer = await res.json().catch(() => null);

    // The api has the enquiry: an operation, or a 202.
    if (res.status === 202 || (res.status === 200 && answer && "state" in answer)) {
      acknowledged();
      const final = answer.response;
      if (final) return answerOf(rec, final.status, final.body);
      const location = res.headers.get("Location") || answer.status_url;
      if (location || !statusUrl) statusUrl = new URL(location || opUrl, `${api}/`).href;
      leadId = answer.lead_id;
      failures = 0;
      // A held request came back unfinished; one answered at once (the api
      // does not hold it) is asked again after Retry-After.
      const hint = retryAfter(res) ?? 1;
      const rest = hint * 1000 - (Date.now() - started);
      if (Date.now() >= deadline) throw uncertain(o, rec, true, leadId);
      if (rest > 0) await sleep(Math.min(rest, deadline - Date.now()), signal);
      continue;
    }
    // A final response: stored (completed, received, failed) or replayed.
    if (["completed", "received", "failed"].includes(answer?.status)) {
      return answerOf(rec, res.status, answer);
    }
    // The key expired while it was polled: the enquiry is sent again, as
    // new, if this page still has it; else nothing is left to ask about.
    if (statusUrl && res.status === 404) {
      if (!body) {
        forget(o, rec.key);
        throw uncertain(o, rec, false, leadId);
      }
      statusUrl = null;
      rec = { v: 1, key: rec.key, at: rec.at, supersedes: null, body, shown: o.shownAt };
      save(o, rec);
      continue;
    }
    const code = answer?.error?.code;
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
        const out = refused(rec, 429, code, answer?.error?.message);
        out.retryAfter = Math.ceil(wait / 1000);
        return out;
      }
      await pause(o, rec, wait, res.status === 429 ? "rate_limited" : "busy", deadline, signal, statusUrl, leadId);
      continue;
    }
    // Any other answer refuses the request: nothing was stored.
    return refused(rec, res.status, code, answer?.error?.message, answer?.error?.details);
  }
}

/**
 * Sends one request to the api, held at most holdFor seconds. A POST
 * carries the enquiry's key and body, and its Form-Signals, read afresh.
 */
async function call(o, method, url, rec, holdFor, signal, body) {
  const headers = { Authorization: `Bearer ${o.publishableKey}` };
  if (holdFor >= 1) headers.Prefer = `wait=${holdFor}`;
  if (rec) {
    headers["Content-Type"] = "application/json";
    headers["Idempotency-Key"] = rec.key;
    headers["Form-Signals"] = formSignals(o, rec);
    if (rec.supersedes) headers.Supersedes = rec.supersedes;
  }
  // A request held longer than it asked for is as good as lost.
  const limit = AbortSignal.timeout((Math.max(holdFor, 0) + 15) * 1000);
  return fetch(url, { method, headers, body: rec ? body : undefined, signal: anySignal([signal, limit]), cache: "no-store" });
}

/** Whether the api itself answers (its /healthz, any page may read it), not a proxy's error page. */
const apiAnswers = (api, signal) => fetch(`${api}/healthz`, { cache: "no-store", credentials: "omit", signal: anySignal([signal, AbortSignal.timeout(15000)]) })
  .then((res) => res.ok && res.json()).then((b) => b?.status === "ok", () => false);

/**
 * The Form-Signals header (an RFC 8941 dictionary) of a POST: hp, whether a
 * honeypot holds anything; t, whole seconds since the form was shown (for a
 * stored enquiry, the form it came from); captcha, the widget's token, when
 * there is one that a structured-field string can carry.
 */
function formSignals(o, rec) {
  const now = (v) => (typeof v === "function" ? v() : v);
  const shown = Number(rec.shown ?? o.shownAt) || Date.now();
  let v = `hp=?${now(o.honeypot) ? 1 : 0}, t=${Math.max(0, Math.floor((Date.now() - shown) / 1000))}`;
  const token = now(o.captcha);
  if (typeof token === "string" && token && /^[\x20-\x7e]*$/.test(token)) v += `, captcha="${token.replace(/[\\"]/g, "\\$&")}"`;
  return v;
}

/** Waits before the next attempt (less when back online), telling the page; past the deadline, gives up. */
async function pause(o, rec, wait, reason, deadline, signal, statusUrl, leadId) {
  if (Date.now() + wait > deadline) throw uncertain(o, rec, !!statusUrl, leadId);
  emit(o, "retrying", { key: rec.key, wait, reason });
  await sleep(wait, signal, true);
}

function uncertain(o, rec, saved, leadId) {
  emit(o, "uncertain", { key: rec.key, saved, lead_id: leadId });
  return new OutcomeUnknown(rec.key, saved, leadId);
}

/** The Answer of a final response body. */
function answerOf(rec, httpStatus, body) {
  const status = body?.status === "completed" || body?.status === "received" ? body.status : "failed";
  const answer = { status, lead_id: body?.lead_id ?? null, httpStatus, key: rec.key };
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

function sleep(ms, signal, online = false) {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const end = () => { clearTimeout(timer); waits.delete(done); signal.removeEventListener("abort", stop); };
    const done = () => { end(); resolve(); };
    const stop = () => { end(); reject(signal.reason); };
    const timer = setTimeout(done, ms);
    if (online) waits.add(done);
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

/** obj's own key, never Object.prototype's (a question named "constructor"). */
const ownValue = (obj, key) => (obj != null && Object.hasOwn(obj, key) ? obj[key] : undefined);

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
 * The form's controls an enquiry is read from: named, neither buttons nor
 * files nor passwords nor disabled, and neither a honeypot nor marked
 * data-leadintake-ignore (themselves or an element around them).
 */
function controls(form) {
  return [...form.elements].filter((el) => el.name && !el.disabled && "value" in el &&
    !/^(submit|button|reset|image|file|password)$/.test(el.type) && !/^(BUTTON|FIELDSET|OUTPUT|OBJECT)$/.test(el.tagName) &&
    !el.closest("[data-leadintake-honeypot], [data-leadintake-ignore]"));
}

/** A control's answer: "" when empty or unchecked; a multiple select's options joined. */
function answerIn(el) {
  if (el.type === "checkbox" || el.type === "radio") return el.checked ? el.value : "";
  if (el.type === "select-multiple") return [...el.selectedOptions].map((opt) => opt.value).join(", ");
  return el.value.trim();
}

/** The name of a form's own question in the lead's fields: a-z 0-9 _, at most 64. */
const fieldName = (name) => name.toLowerCase().replace(/[^a-z0-9_]/g, "_").slice(0, 64);

/** Whether a control's name is the snippet's own, never a question: a captcha widget's token. */
const isCaptcha = (name) => CAPTCHA_FIELDS.includes(name);

/**
 * Reads a lead from a form: the members (options.map names their fields),
 * utm_* as utm, every other field in fields.
 *
 * @param {HTMLFormElement} form
 * @param {{source?: string, map?: Partial<Record<LeadMember, string>>}|string} [options]
 * @returns {Lead}
 */
export function leadFromForm(form, options = {}) {
  const o = typeof options === "string" ? { source: options } : options;
  const nameOf = (member) => ownValue(o.map, member) ?? member;
  const own = new Set([...TEXT_FIELDS, "source", "consent"].map(nameOf));
  const answers = new Map();
  let consent;
  for (const el of controls(form)) {
    // A hidden input (a CSRF token) is never a question.
    if (el.type === "hidden" && !own.has(el.name) && !el.name.startsWith("utm_")) continue;
    if (el.name === nameOf("consent") && el.type === "checkbox") consent = el.checked;
    const v = answerIn(el);
    if (v) answers.set(el.name, answers.has(el.name) ? `${answers.get(el.name)}, ${v}` : v);
  }
  const text = (member) => answers.get(nameOf(member)) ?? "";
  const lead = { email: text("email"), source: text("source") || o.source || "website" };
  for (const member of TEXT_FIELDS.slice(1)) if (text(member)) lead[member] = text(member);
  if (consent !== undefined) lead.consent = consent;
  // No prototype: "__proto__" is a question like any other.
  const utm = Object.create(null), fields = Object.create(null);
  for (const [name, v] of answers) {
    if (own.has(name) || isCaptcha(name)) continue;
    if (name.startsWith("utm_")) utm[name.slice(4)] = v;
    else {
      const f = fieldName(name);
      fields[f] = Object.hasOwn(fields, f) ? `${fields[f]}, ${v}` : v;
    }
  }
  if (Object.keys(utm).length) lead.utm = utm;
  if (Object.keys(fields).length) lead.fields = fields;
  return lead;
}

/** Puts a lead back into the form's fields (a resumed enquiry): its members and its fields. */
function fillForm(form, lead, map) {
  const member = new Map();
  for (const m of [...TEXT_FIELDS, "source", "consent"]) member.set(ownValue(map, m) ?? m, m);
  for (const el of controls(form)) {
    if (el.type === "hidden" || isCaptcha(el.name) || el.name.startsWith("utm_")) continue;
    const m = member.get(el.name);
    if (m === "consent") {
      if (el.type === "checkbox") el.checked = !!lead.consent;
      continue;
    }
    const v = String((m ? ownValue(lead, m) : ownValue(lead.fields, fieldName(el.name))) ?? "");
    if (el.type === "checkbox" || el.type === "radio") el.checked = v.split(", ").includes(el.value);
    else if (el.type === "select-multiple") for (const opt of el.options) opt.selected = v.split(", ").includes(opt.value);
    else el.value = v;
  }
}

/** Whether any of the form's honeypot fields holds anything: what a person never fills in. */
function honeypotFilled(form) {
  for (const marked of form.querySelectorAll("[data-leadintake-honeypot]")) {
    for (const el of [marked, ...marked.querySelectorAll("input, textarea, select")]) {
      if ("value" in el && el.tagName !== "BUTTON" && (el.type === "checkbox" || el.type === "radio" ? el.checked : el.value.trim())) return true;
    }
  }
  return false;
}

/** The token a captcha widget left in the form, or "". */
function captchaIn(form) {
  for (const name of CAPTCHA_FIELDS) {
    for (const el of form.querySelectorAll(`[name="${name}"]`)) if (el.value) return el.value;
  }
  return "";
}

/**
 * Takes over a lead form's submit: sends leadFromForm's lead with
 * submitLead, and tells the visitor in a live region; resumes an enquiry
 * left by an earlier visit.
 *
 * @param {HTMLFormElement} form
 * @param {Options} options
 * @returns {{detach(): void, submit(): Promise<Answer|undefined>}}
 */
export function attachForm(form, options) {
  const o = {
    shownAt: Date.now(), honeypot: () => honeypotFilled(form), captcha: () => captchaIn(form),
    ...options, target: options.target ?? form, name: options.name ?? (form.id || form.getAttribute("name") || "enquiry"),
  };
  if (o.attribution === false) noTouch();
  const messages = { ...MESSAGES, ...o.messages };
  const status = form.querySelector("[data-leadintake-status], [aria-live]") ?? form.appendChild(liveRegion());
  let marked = [];

  const say = (key, detail) => {
    const m = ownValue(messages, key) ?? messages.failed;
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

  const send = async (begin) => {
    marked = unmark(marked);
    busy(+1);
    try {
      const answer = await begin();
      if (answer.error?.details) marked = mark(form, answer.error.details, o.map);
      if ((answer.status === "completed" || answer.status === "received") && o.reset !== false) form.reset();
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
  const sendForm = () => send(() => submitLead({ ...o, lead: leadFromForm(form, o) }));
  const onSubmit = (e) => {
    e.preventDefault();
    if (!form.hasAttribute("aria-busy")) sendForm();
  };
  form.addEventListener("submit", onSubmit);

  const pending = pendingLead(o);
  if (pending) {
    if (pending.lead) fillForm(form, pending.lead, o.map);
    send(() => resumeLead(o));
  }
  const onOnline = () => {
    if (!form.hasAttribute("aria-busy") && pendingLead(o)) send(() => resumeLead(o));
  };
  globalThis.addEventListener?.("online", onOnline);
  return {
    submit: sendForm,
    detach() {
      form.removeEventListener("submit", onSubmit);
      o.target.removeEventListener(PROGRESS_EVENT, onProgress);
      globalThis.removeEventListener?.("online", onOnline);
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

/** The form's control a refused member of the lead came from. */
function controlOf(form, field, map) {
  const [member, rest] = field.split(/\.(.*)/s);
  const name = member === "utm" ? `utm_${rest}` : member !== "fields" ? ownValue(map, member) ?? member : null;
  const el = name ? form.elements.namedItem(name) : controls(form).find((c) => fieldName(c.name) === rest);
  return el instanceof RadioNodeList ? el[0] : el;
}

/** Marks the fields the api refused; returns what to unmark later. */
function mark(form, details, map) {
  const marked = [];
  for (const { field, problem } of details) {
    const el = controlOf(form, field, map);
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
    msg.textContent = ownValue(FIELD_HELP, field) ?? (problem ? `${problem[0].toUpperCase()}${problem.slice(1)}.` : "Please check this field.");
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
