package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/leadintake/leadintake/internal/testkit"
)

// questionnaire is a form with a field of every kind attachForm meets: the
// lead's members under the form's own names (mapped), questions of its
// own, a honeypot, a captcha widget's token, and what is never sent.
const questionnaire = `<form id="quote">
  <input name="work_email" value="ada@example.com">
  <input name="full_name" value="Ada">
  <input name="organisation" value="Engines">
  <input name="email" value="billing@example.com">
  <input type="hidden" name="source" value="referral">
  <input id="team" name="Team Size" value="11-50">
  <select name="budget"><option value="">pick</option><option value="10k-50k" selected>10k-50k</option></select>
  <input type="checkbox" name="newsletter" value="yes" checked>
  <input type="checkbox" name="unticked" value="yes">
  <input type="radio" name="plan" value="a"><input type="radio" name="plan" value="b" checked>
  <input name="empty_one" value="">
  <input name="ignored" value="x" data-leadintake-ignore>
  <div data-leadintake-ignore><input name="inside_ignored" value="x"></div>
  <div data-leadintake-honeypot aria-hidden="true"><input id="trap" name="website" value="" tabindex="-1" autocomplete="off"></div>
  <input type="hidden" name="cf-turnstile-response" value="tok-123">
  <input type="hidden" name="utm_campaign" value="spring">
  <input type="checkbox" name="consent" checked>
  <textarea name="message">Hello</textarea>
  <input type="file" name="attachment">
  <input name="disabled_one" value="x" disabled>
  <button name="action" value="send">Send</button>
  <input type="submit" name="go" value="Go">
  <p data-leadintake-status></p>
</form>`

// The lead questionnaire makes.
const questionnaireLead = `{"email":"ada@example.com","source":"referral","name":"Ada","company":"Engines","message":"Hello","consent":true,` +
	`"utm":{"campaign":"spring"},"fields":{"email":"billing@example.com","team_size":"11-50","budget":"10k-50k","newsletter":"yes","plan":"b"}}`

// formIn puts questionnaire into the page, runs prepare (JavaScript, with
// form and m, the module, in scope), attaches the snippet to the form with
// the map of questionnaire (and without attribution), and then, when submit, submits it. It returns
// when the form's run is over: what the form says, the requests api got.
func formIn(t *testing.T, tab context.Context, api *scriptedAPI, prepare string, submit bool) (state, status string) {
	t.Helper()
	script := fmt.Sprintf(`(async () => {
		document.body.innerHTML = %s;
		const form = document.getElementById("quote");
		const m = await import(%q);
		%s;
		const over = new Promise((resolve) => form.addEventListener(m.PROGRESS_EVENT, (e) => {
			if (["done", "failed", "uncertain"].includes(e.detail.state)) setTimeout(resolve, 0);
		}));
		m.attachForm(form, { api: %q, publishableKey: %q, timeout: 30000, wait: 3, attribution: false,
			map: { email: "work_email", name: "full_name", company: "organisation" } });
		if (%t) form.requestSubmit();
		await over;
		return JSON.stringify([form.dataset.leadintakeState, form.querySelector("[data-leadintake-status]").textContent]);
	})()`, jsQuote(questionnaire), api.module, prepare, api.url, testPK, submit)
	ctx, cancel := context.WithTimeout(tab, 2*testkit.Patience)
	defer cancel()
	res, err := chromedp.Run(ctx, chromedp.Evaluate[string](script, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("the form in the browser: %v", err)
	}
	var out [2]string
	if err := json.Unmarshal([]byte(res), &out); err != nil {
		t.Fatal(err)
	}
	return out[0], out[1]
}

// evalIn evaluates a JavaScript expression to a string.
func evalIn(t *testing.T, tab context.Context, expr string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, testkit.Patience)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

var signalsPattern = regexp.MustCompile(`^hp=\?([01]), t=[0-9]+(?:, captcha="([^"\\]*)")?$`)

// attachForm reads a form: its fields mapped onto the lead's members, its
// own questions into fields, the honeypot and the captcha into
// Form-Signals; it marks a refused question, shows a received enquiry's
// thanks, and puts a resumed enquiry back into the form.
func TestAttachFormInBrowser(t *testing.T) {
	t.Parallel()
	tab := browserTab(t)

	t.Run("FieldsMapAndSignals", func(t *testing.T) {
		api := newScriptedAPI(t, scripted{status: http.StatusCreated, body: `{"status":"completed","lead_id":"L1"}`})
		state, status := formIn(t, tab, api, clearStorage, true)
		got := api.requests()
		if state != "done" || len(got) != 1 {
			t.Fatalf("the form went %q (%q), requests %+v", state, status, got)
		}
		if !sameJSON(t, got[0].Body, questionnaireLead) {
			t.Errorf("the form sent\n%s\nwant\n%s", got[0].Body, questionnaireLead)
		}
		if m := signalsPattern.FindStringSubmatch(got[0].Signals); m == nil || m[1] != "0" || m[2] != "tok-123" {
			t.Errorf("Form-Signals %q, want hp=?0, t, and the widget's token", got[0].Signals)
		}
	})

	t.Run("AFilledHoneypot", func(t *testing.T) {
		api := newScriptedAPI(t, scripted{status: http.StatusCreated, body: `{"status":"completed","lead_id":"L2"}`})
		state, _ := formIn(t, tab, api, clearStorage+`; form.querySelector("#trap").value = "https://spam.example"`, true)
		got := api.requests()
		if state != "done" || len(got) != 1 {
			t.Fatalf("the form went %q, requests %+v", state, got)
		}
		if m := signalsPattern.FindStringSubmatch(got[0].Signals); m == nil || m[1] != "1" {
			t.Errorf("Form-Signals %q, want hp=?1", got[0].Signals)
		}
		if !sameJSON(t, got[0].Body, questionnaireLead) {
			t.Errorf("with the honeypot filled the form sent\n%s\nwant what it sends without", got[0].Body)
		}
	})

	t.Run("ARefusedQuestionIsMarked", func(t *testing.T) {
		api := newScriptedAPI(t, scripted{status: http.StatusUnprocessableEntity, body: `{"error":{"code":"validation_failed","message":"x",` +
			`"details":[{"field":"fields.team_size","problem":"must be at most 1000 characters"},{"field":"email","problem":"must be one address"}]}}`})
		state, status := formIn(t, tab, api, clearStorage, true)
		if state != "failed" || status == "" {
			t.Fatalf("the form went %q (%q), want failed", state, status)
		}
		if got := evalIn(t, tab, `[document.getElementById("team").getAttribute("aria-invalid"), document.getElementById("team-error")?.textContent,
			document.querySelector("[name=work_email]").getAttribute("aria-invalid"), document.activeElement.id].join("|")`); got !=
			"true|Must be at most 1000 characters.|true|team" {
			t.Errorf("the refused fields (aria-invalid|error|mapped email's aria-invalid|focus): %q", got)
		}
	})

	t.Run("ReceivedShowsTheThanks", func(t *testing.T) {
		api := newScriptedAPI(t, scripted{status: http.StatusOK, header: map[string]string{"Idempotent-Replayed": "false"},
			body: `{"status":"received","lead_id":"L3"}`})
		state, status := formIn(t, tab, api, clearStorage+`; form.querySelector("[name=full_name]").value = "Typed"`, true)
		if state != "done" || !regexp.MustCompile(`^Thank you!`).MatchString(status) {
			t.Fatalf("a received enquiry: the form went %q, says %q; want done and the thanks", state, status)
		}
		if v := evalIn(t, tab, `document.querySelector("[name=full_name]").value`); v != "Ada" {
			t.Errorf("after the thanks the form holds %q, want it reset", v)
		}
	})

	// An enquiry left unacknowledged by an earlier page: the mapped fields
	// and the questions are filled back from it, and it is sent again.
	t.Run("AResumedEnquiryFillsTheForm", func(t *testing.T) {
		api := newScriptedAPI(t, scripted{status: http.StatusServiceUnavailable, header: map[string]string{"Retry-After": "600"},
			body: `{"error":{"code":"store_unavailable","message":"x"}}`})
		stored := `{"email":"grace@example.com","source":"referral","name":"Grace","fields":{"team_size":"2-10","budget":"10k-50k","plan":"a","newsletter":"yes"}}`
		setup := fmt.Sprintf(`localStorage.setItem("leadintake:%s:quote", JSON.stringify({v: 1, key: "resumed-key-0001", at: Date.now(), supersedes: null, body: %s}));
			for (const el of form.elements) { if (el.type === "checkbox" || el.type === "radio") el.checked = false; else if (el.type !== "hidden" && "value" in el) el.value = ""; }`,
			testPK, jsQuote(stored))
		state, _ := formIn(t, tab, api, setup, false)
		got := api.requests()
		if state != "uncertain" || len(got) != 1 || got[0].Key != "resumed-key-0001" || got[0].Body != stored {
			t.Fatalf("the form went %q, requests %+v; want the stored enquiry sent under its key", state, got)
		}
		filled := evalIn(t, tab, `JSON.stringify(["work_email", "full_name", "organisation", "Team Size", "budget", "message"].map((n) => document.querySelector("[name='" + n + "']").value)
			.concat([document.querySelector("[name=plan][value=a]").checked, document.querySelector("[name=newsletter]").checked, document.querySelector("[name=consent]").checked]))`)
		if want := `["grace@example.com","Grace","","2-10","10k-50k","",true,true,false]`; filled != want {
			t.Errorf("the resumed form holds %s, want %s", filled, want)
		}
	})

	// A password, a hidden input (a CSRF or session token) and a file are
	// never sent; a hidden input named like a member or utm_x is that
	// member still. Questions named like Object.prototype's members are
	// questions like any other: sent as they are, polluting nothing.
	t.Run("SecretsAreNotSentAndNamesArePlain", func(t *testing.T) {
		const form = `<form id="login-like">
  <input name="email" value="ada@example.com">
  <input type="hidden" name="source" value="event">
  <input type="hidden" name="utm_medium" value="email">
  <input type="password" name="password" value="hunter2">
  <input type="password" name="email_password" value="hunter3">
  <input type="hidden" name="csrf_token" value="csrf-secret">
  <input type="hidden" name="sessionid" value="session-secret">
  <input type="file" name="cv">
  <input name="constructor" value="builder">
  <input name="__proto__" value="polluted">
  <input name="toString" value="text">
  <input name="hasOwnProperty" value="mine">
  <p data-leadintake-status></p>
</form>`
		const want = `{"email":"ada@example.com","source":"event","utm":{"medium":"email"},` +
			`"fields":{"constructor":"builder","__proto__":"polluted","tostring":"text","hasownproperty":"mine"}}`
		api := newScriptedAPI(t, scripted{status: http.StatusCreated, body: `{"status":"completed","lead_id":"L9"}`})
		script := fmt.Sprintf(`(async () => {
			localStorage.clear();
			document.body.innerHTML = %s;
			const form = document.getElementById("login-like");
			const m = await import(%q);
			const read = JSON.stringify(m.leadFromForm(form));
			const over = new Promise((resolve) => form.addEventListener(m.PROGRESS_EVENT, (e) => {
				if (["done", "failed", "uncertain"].includes(e.detail.state)) setTimeout(resolve, 0);
			}));
			m.attachForm(form, { api: %q, publishableKey: %q, timeout: 30000, wait: 3, attribution: false });
			form.requestSubmit();
			await over;
			return JSON.stringify([read, form.dataset.leadintakeState, String(({}).polluted), String(Object.prototype.constructor === Object)]);
		})()`, jsQuote(form), api.module, api.url, testPK)
		ctx, cancel := context.WithTimeout(tab, 2*testkit.Patience)
		defer cancel()
		res, err := chromedp.Run(ctx, chromedp.Evaluate[string](script, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatal(err)
		}
		var out [4]string
		if err := json.Unmarshal([]byte(res), &out); err != nil {
			t.Fatal(err)
		}
		if !sameJSON(t, out[0], want) {
			t.Errorf("leadFromForm:\n%s\nwant\n%s", out[0], want)
		}
		got := api.requests()
		if out[1] != "done" || len(got) != 1 {
			t.Fatalf("the form went %q, requests %+v", out[1], got)
		}
		if !sameJSON(t, got[0].Body, want) {
			t.Errorf("the form sent\n%s\nwant\n%s", got[0].Body, want)
		}
		for _, secret := range []string{"hunter", "csrf-secret", "session-secret", "function"} {
			if strings.Contains(got[0].Body, secret) {
				t.Errorf("the form sent %q: %s", secret, got[0].Body)
			}
		}
		if out[2] != "undefined" || out[3] != "true" {
			t.Errorf("Object.prototype after the form was read: polluted %s, constructor intact %s", out[2], out[3])
		}

		// Put back into the form from a stored enquiry: each question gets
		// its own answer, and none an inherited member's.
		stored := `{"email":"grace@example.com","source":"event","fields":{"__proto__":"p2","hasownproperty":"h2"}}`
		refill := fmt.Sprintf(`(async () => {
			document.body.innerHTML = %s;
			const form = document.getElementById("login-like");
			for (const el of form.elements) if (el.type !== "hidden") el.value = "";
			localStorage.setItem("leadintake:%s:login-like", JSON.stringify({v: 1, key: "refill-key-0001", at: Date.now(), supersedes: null, body: %s}));
			const m = await import(%q);
			m.attachForm(form, { api: %q, publishableKey: %q, timeout: 2000, wait: 1 });
			return JSON.stringify(["email", "constructor", "__proto__", "toString", "hasOwnProperty"].map((n) => form.querySelector("[name='" + n + "']").value));
		})()`, jsQuote(form), testPK, jsQuote(stored), api.module, api.url, testPK)
		res, err = chromedp.Run(ctx, chromedp.Evaluate[string](refill, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatal(err)
		}
		if want := `["grace@example.com","","p2","","h2"]`; res != want {
			t.Errorf("the form filled back from a stored enquiry holds %s, want %s", res, want)
		}
	})

	// Honeypot and captcha fields are the snippet's: never sent as fields,
	// whatever their names.
	t.Run("LeadFromForm", func(t *testing.T) {
		api := newScriptedAPI(t)
		evalIn(t, tab, fmt.Sprintf(`(() => { document.body.innerHTML = %s; return ""; })()`, jsQuote(questionnaire)))
		ctx, cancel := context.WithTimeout(tab, testkit.Patience)
		defer cancel()
		res, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`import(%q).then((m) => JSON.stringify(m.leadFromForm(document.getElementById("quote"), "ads")))`, api.module), chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatal(err)
		}
		// Without the map, work_email is a question, and the form's own
		// source wins over the default.
		want := `{"email":"billing@example.com","source":"referral","message":"Hello","consent":true,"utm":{"campaign":"spring"},` +
			`"fields":{"work_email":"ada@example.com","full_name":"Ada","organisation":"Engines","team_size":"11-50","budget":"10k-50k","newsletter":"yes","plan":"b"}}`
		if !sameJSON(t, res, want) {
			t.Errorf("leadFromForm without the map:\n%s\nwant\n%s", res, want)
		}
	})
}
