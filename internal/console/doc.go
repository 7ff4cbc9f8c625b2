// Package console is the operator console: server-rendered pages under
// /console/ on the api's admin listener for the people who run the service
// day to day. The leads (newest first, filtered, a keyset page at a time),
// a lead with its delivery log and callbacks (and, on a recorded request,
// its enquiry), the quarantine and its release, redrives, the
// destinations' state and the audit.
//
// It is a thin layer over package operator: every page reads through it,
// and every write and every look at an enquiry is an operator method that
// checks the login's role and records itself in the audit, as the command
// line and the admin API's JSON do. The pages are html/template (visitor
// text is escaped wherever it appears), with their stylesheet and a few
// lines of optional script embedded in the binary: no build step, no
// framework, and every page works without JavaScript.
//
// The admin listener authenticates (basic auth: ADMIN_USER, or a login of
// the clients file's operators, checked by Logins) and hands the login on
// (operator.ActorFrom). The console refuses a write that a browser did not
// send from the console itself (Sec-Fetch-Site or Origin), as the admin
// listener refuses cross-site writes, and a viewer's write (403).
package console
