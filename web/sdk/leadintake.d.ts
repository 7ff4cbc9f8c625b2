/**
 * leadintake.js: the browser's side of leadintake's retry contract, for lead
 * forms. One enquiry is one Idempotency-Key, kept in localStorage until a
 * final answer; every retry sends the same key and the same body.
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
 * OutcomeUnknown when none came within the timeout. Network failures,
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
 * Reads a lead from a form: the lead's members (options.map names their
 * fields), utm_* fields as utm, every other named field as fields (a field
 * named like an Object member, "constructor" or "__proto__", included, as
 * a plain name). Password, file and hidden inputs (CSRF and session
 * tokens) are never read, except a hidden input named like a lead's member
 * or utm_*; nor are buttons, honeypots, captcha tokens, or fields marked
 * data-leadintake-ignore.
 */
export declare function leadFromForm(form: HTMLFormElement, options?: { source?: string; map?: Partial<Record<LeadMember, string>> } | string): Lead;

/**
 * Takes over a lead form's submit and tells the visitor what happens. An
 * enquiry left by an earlier visit is resumed when the form is attached,
 * and one left with an unknown outcome is resumed when the browser comes
 * back online.
 */
export declare function attachForm(form: HTMLFormElement, options: Options): {
  detach(): void;
  submit(): Promise<Answer | undefined>;
};
