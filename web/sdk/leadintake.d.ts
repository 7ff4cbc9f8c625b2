/**
 * leadintake.js: the browser's side of leadintake's retry contract, for lead
 * forms. One enquiry is one Idempotency-Key, kept in localStorage until a
 * final answer; every retry sends the same key and the same body.
 *
 * Every page that loads the module records the visitor's first touch (the
 * first page they landed on with UTM values, a click id or a referrer from
 * another site) in localStorage for 90 days; each enquiry carries it as
 * attribution.first, with the page of the form as attribution.last, unless
 * the options say attribution: false.
 *
 * @module leadintake
 */

/** Name of the progress events, dispatched on the options' target (the form). */
export declare const PROGRESS_EVENT: "leadintake:progress";

/** One enquiry, as POST /v1/leads takes it. */
export interface Lead {
  email: string;
  source: string;
  name?: string | null;
  company?: string | null;
  phone?: string | null;
  website?: string | null;
  message?: string | null;
  /** Campaign parameters: at most 20, each at most 200 characters. */
  utm?: Record<string, string> | null;
  consent?: boolean | null;
  /** The form's own questions: at most 50, names of a-z 0-9 _ (1..64), answers of at most 1000 characters. */
  fields?: Record<string, string> | null;
  /** Where the visitor came from; submitLead adds it to a lead without one (unless attribution: false). */
  attribution?: Attribution | null;
}

/** Where a lead came from: the first touch and the last (the page of the form). */
export interface Attribution {
  first?: Touch | null;
  last?: Touch | null;
}

/** One visit. */
export interface Touch {
  /** The page: its URL without the fragment, nor a query string but utm_* and the click ids; at most 2048 characters. */
  landing_page?: string | null;
  /** Another site's page the visitor came from (document.referrer), stripped the same way. */
  referrer?: string | null;
  /** The page's utm_* parameters, without the prefix ({source: "google"}): at most 20, each at most 200 characters. */
  utm?: Record<string, string> | null;
  /** The page's click ids, each at most 512 characters. */
  click_ids?: { gclid?: string | null; fbclid?: string | null; msclkid?: string | null } | null;
  /** When the page was loaded, RFC 3339. */
  at?: string | null;
}

/** The lead's members a form field may be mapped onto (attachForm's map). */
export type LeadMember = "email" | "source" | "name" | "company" | "phone" | "website" | "message" | "consent";

/** A text shown to the visitor, or one made from the progress event's detail. */
export type Message = string | ((detail: any) => string);

export interface Options {
  /** Base URL of the leadintake api, e.g. "https://leads.example.com"; by default the origin this module was loaded from (a site hosting its own copy names the api). */
  api?: string;
  /** The page's publishable key (pk_...). */
  publishableKey: string;
  /** The enquiry (submitLead only). */
  lead?: Lead;
  /** Milliseconds to keep trying before the outcome is reported unknown (default 60000). */
  timeout?: number;
  /** Seconds each request asks the api to hold its answer, Prefer: wait (default 20). */
  wait?: number;
  /** Names the stored enquiry in localStorage; one per name. attachForm uses the form's id. */
  name?: string;
  /** Receives the leadintake:progress events. */
  target?: EventTarget;
  /** Stops trying (the enquiry stays stored). */
  signal?: AbortSignal;
  /** When the form was shown (ms since the epoch), for the signal t; by default when the page started loading (attachForm: when it was attached). */
  shownAt?: number;
  /** Whether a honeypot field holds anything (the signal hp); attachForm reads the form's [data-leadintake-honeypot] fields. */
  honeypot?: boolean | (() => boolean);
  /** The captcha widget's token (the signal captcha); attachForm reads the widgets' hidden fields. */
  captcha?: string | (() => string);
  /** attachForm: the lead's source when the form has no "source" field (default "website"). */
  source?: string;
  /** attachForm: the form's field for a lead's member, e.g. {email: "work_email"}. */
  map?: Partial<Record<LeadMember, string>>;
  /** attachForm: empty the form once the enquiry is completed (default true). */
  reset?: boolean;
  /** attachForm: replaces the texts shown, by state or error code. */
  messages?: Record<string, Message>;
  /**
   * false: the page records no first touch (and forgets the one kept), and
   * its enquiries carry no attribution (default true). The attribution of an
   * enquiry is fixed when it is first stored: a retry, a reload, or the same
   * enquiry sent again from another page sends it as it was.
   */
  attribution?: boolean;
}

/** A final answer: the api's for the enquiry, or its refusal of the request. */
export interface Answer {
  /** "received": the api keeps the enquiry and says no more (a page shows its thanks, as for "completed"); "refused": the api refused the request and stored nothing. */
  status: "completed" | "received" | "failed" | "refused";
  lead_id: string | null;
  error?: { code: string; message: string; details?: { field: string; problem: string }[] };
  /** The status the answer came with. */
  httpStatus: number;
  /** The enquiry's Idempotency-Key. */
  key: string;
  /** Seconds to wait before sending again (rate_limited). */
  retryAfter?: number;
}

/** The enquiry stored under a name, waiting for a final answer. */
export interface Pending {
  key: string;
  /** null once the api has acknowledged it and the page that sent it is gone: only the key is kept then. */
  lead: Lead | null;
  supersedes: string | null;
  acknowledged: boolean;
}

/**
 * The rejection of submitLead when no final answer came within the timeout.
 * The enquiry stays stored with its key: sending it again, or reloading the
 * page, resumes it.
 */
export declare class OutcomeUnknown extends Error {
  constructor(key: string, saved: boolean, leadId: string | null);
  /** The enquiry's Idempotency-Key. */
  key: string;
  /** Whether the api confirmed it has the enquiry. */
  saved: boolean;
  /** Its lead id, when saved. */
  leadId: string | null;
}

/** Returns the enquiry stored under these options' name, or null. */
export declare function pendingLead(options: Options): Pending | null;

/**
 * Sends one enquiry and keeps at it until a final answer; rejects with
 * OutcomeUnknown when none came within the timeout (or with the signal's
 * reason when aborted). The same enquiry as the stored one (the same lead,
 * whatever its attribution) is sent again under its key, with the bytes
 * first stored, or polled once the api has it; a different one gets a new
 * key and, while the stored one has no final answer, `Supersedes: <its
 * key>`. Progress is dispatched as leadintake:progress events on
 * options.target, detail {state, key, ...}: "saving" (attempt, resumed),
 * "retrying" (wait in ms, reason: offline, lost, busy, rate_limited),
 * "waiting" (the api has the enquiry; lead_id), "done" (completed or
 * received), "failed" (answer), "uncertain" (saved). Network failures,
 * 5xx, 408 and 429 are retried with back-off; an api out of reach (down,
 * or behind a load balancer whose error pages carry no CORS headers) is
 * retried too, and only an origin the api refuses (while it answers) is
 * final (origin_not_allowed). A wait between attempts ends when the
 * browser comes back online.
 */
export declare function submitLead(options: Options): Promise<Answer>;

/** Resumes the enquiry stored under these options' name; null when none is stored. */
export declare function resumeLead(options: Options): Promise<Answer> | null;

/**
 * Reads a lead from a form: the text members email, name, company, phone,
 * website and message (trimmed; empty ones left out), source (a field, else
 * options.source, else "website") and consent (a checkbox: checked or not),
 * each from the field of its own name or the one options.map names; utm_*
 * fields as utm ({source: ...}); every other named field as fields, its
 * name lower-cased, other characters than a-z 0-9 _ turned into _ (a field
 * named like an Object member, "constructor" or "__proto__", included, as
 * a plain name). Password, file and hidden inputs (CSRF and session
 * tokens) are never read, except a hidden input named like a lead's member
 * or utm_*; nor are buttons, honeypots, captcha tokens, or fields marked
 * data-leadintake-ignore.
 */
export declare function leadFromForm(form: HTMLFormElement, options?: { source?: string; map?: Partial<Record<LeadMember, string>> } | string): Lead;

/**
 * Takes over a lead form's submit: reads the lead (leadFromForm, with
 * options.map), sends it with submitLead, disables the submit buttons
 * meanwhile, and tells the visitor what happens in plain words in a polite
 * live region (the form's [data-leadintake-status] or [aria-live] element,
 * else one it appends). Every POST carries the form's signals: whether a
 * honeypot holds anything, the seconds since the form was attached (or
 * options.shownAt), and a captcha widget's token. Refused fields are marked
 * aria-invalid and described (aria-describedby) by their error, and the
 * first gets the focus. The form's data-leadintake-state attribute follows
 * the progress (for styling). An enquiry left by an earlier visit is
 * resumed when the form is attached (put back into the form while the api
 * has not acknowledged it, else only polled), and one left with an unknown
 * outcome is resumed when the browser comes back online.
 */
export declare function attachForm(form: HTMLFormElement, options: Options): {
  detach(): void;
  submit(): Promise<Answer | undefined>;
};
