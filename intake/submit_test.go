package intake_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/leadintake/leadintake/intake"
	"github.com/leadintake/leadintake/internal/testkit"
	"github.com/leadintake/leadintake/lead"
	"github.com/leadintake/leadintake/response"
)

func TestSubmitConcurrently(t *testing.T) {
	t.Parallel()

	const n = 50

	type testBundle struct {
		api *testAPI
		key string
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{api: newTestAPI(t, nil), key: testkit.NewKey()}
	}

	t.Run("SameKeySamePayloadMakesOneLead", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		requireOneClaim(t, bundle.key, submitTogether(t, bundle.api, bundle.key, n, validBody))
		requireRows(t, bundle.api.Pool, rowCounts{Leads: 1, Keys: 1, Jobs: 1})
	})

	t.Run("SameKeyTwoPayloadsOneWins", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		payloads := []string{
			`{"email":"first@example.com","source":"website"}`,
			`{"email":"second@example.com","source":"website"}`,
		}
		answers := submitTogether(t, bundle.api, bundle.key, n, payloads...)

		// The winner is the payload of the fresh claim; every request of
		// the other is refused.
		fresh := slices.IndexFunc(answers, func(r *reply) bool {
			return r.Status == http.StatusAccepted && r.Header.Get("Idempotent-Replayed") == "false"
		})
		if fresh < 0 {
			t.Fatal("no request claimed the key")
		}
		winner := fresh % 2
		var won []*reply
		for i, res := range answers {
			if i%2 == winner {
				won = append(won, res)
			} else {
				res.requireError(t, http.StatusUnprocessableEntity, response.CodeKeyReused)
			}
		}
		leadID := requireOneClaim(t, bundle.key, won)
		requireRows(t, bundle.api.Pool, rowCounts{Leads: 1, Keys: 1, Jobs: 1})

		var email string
		if err := bundle.api.Pool.QueryRow(context.Background(),
			"SELECT submission->>'email' FROM leads WHERE id = $1", leadID).Scan(&email); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(payloads[winner], email) {
			t.Fatalf("stored lead has %s, want the winner's payload %s", email, payloads[winner])
		}
	})
}

// submitTogether sends n submissions of key at once, the i-th with
// bodies[i%len(bodies)], and returns the answers in that order.
func submitTogether(t *testing.T, api *testAPI, key string, n int, bodies ...string) []*reply {
	t.Helper()
	answers := make([]*reply, n)
	errs := make([]error, n)
	together(n, func(i int) {
		answers[i], errs[i] = api.trySend(api.submission(key, bodies[i%len(bodies)]))
	})
	for i, err := range errs {
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	return answers
}

// requireOneClaim checks that answers are 202s for key, all of one lead, and
// that exactly one says Idempotent-Replayed: false. It returns the lead.
func requireOneClaim(t *testing.T, key string, answers []*reply) string {
	t.Helper()
	var leadID string
	fresh := 0
	for i, res := range answers {
		replayed := res.Header.Get("Idempotent-Replayed") == "true"
		if !replayed {
			fresh++
		}
		body := res.requireAccepted(t, key, replayed)
		if leadID == "" {
			leadID = body.LeadID
		}
		if body.LeadID != leadID {
			t.Fatalf("answer %d: lead %s, another got %s", i, body.LeadID, leadID)
		}
	}
	if fresh != 1 {
		t.Fatalf("%d answers with Idempotent-Replayed: false, want exactly 1", fresh)
	}
	return leadID
}

func TestSubmitRefusals(t *testing.T) {
	t.Parallel()

	// Refusals change nothing, and every case uses keys of its own: the
	// cases share one API.
	api := newTestAPI(t, nil)

	const max = intake.DefaultMaxBodyBytes
	// padded is validBody padded with white space to n bytes: white space
	// does not change the lead.
	padded := func(n int) string { return validBody + strings.Repeat(" ", n-len(validBody)) }
	nested := func(depth int) string {
		return `{"email":"ada@example.com","source":"website","utm":{"a":` +
			strings.Repeat("[", depth-2) + strings.Repeat("]", depth-2) + `}}`
	}

	tests := []struct {
		name string
		// key is the Idempotency-Key sent; default a fresh valid key,
		// which a corrected request must then find still free.
		key    string
		body   string // default validBody
		edits  []func(*http.Request)
		status int
		code   response.Code
		// fields lists, sorted, the fields of the details of a
		// validation_failed or unknown_field.
		fields []string
	}{
		{name: "RefusesMissingToken", edits: edits(withoutHeader("Authorization")), status: 401, code: response.CodeUnauthorized},
		{name: "RefusesUnknownToken", edits: edits(withHeader("Authorization", "Bearer not-a-token")), status: 401, code: response.CodeUnauthorized},
		{name: "RefusesOtherScheme", edits: edits(withHeader("Authorization", "Basic "+tokenA)), status: 401, code: response.CodeUnauthorized},
		{name: "RefusesBearerWithoutToken", edits: edits(withHeader("Authorization", "Bearer ")), status: 401, code: response.CodeUnauthorized},
		{name: "RefusesBareToken", edits: edits(withHeader("Authorization", tokenA)), status: 401, code: response.CodeUnauthorized},
		{name: "RefusesOtherClientID", edits: edits(withHeader("X-Client-Id", "b")), status: 403, code: response.CodeClientMismatch},
		{name: "RefusesUnknownClientID", edits: edits(withHeader("X-Client-Id", "nobody")), status: 403, code: response.CodeClientMismatch},

		{name: "RefusesMissingKey", edits: edits(withoutHeader("Idempotency-Key")), status: 400, code: response.CodeKeyMissing},
		{name: "RefusesEmptyKey", edits: edits(withHeader("Idempotency-Key", "")), status: 400, code: response.CodeKeyMissing},
		{name: "RefusesShortKey", key: "abc-123", status: 400, code: response.CodeKeyInvalid},
		{name: "RefusesLongKey", key: strings.Repeat("k", 256), status: 400, code: response.CodeKeyInvalid},
		{name: "RefusesKeyWithSpace", key: "my key 123", status: 400, code: response.CodeKeyInvalid},
		{name: "RefusesKeyWithSlash", key: "orders/1234", status: 400, code: response.CodeKeyInvalid},
		{name: "RefusesNonASCIIKey", key: "clé-unique-1", status: 400, code: response.CodeKeyInvalid},
		{name: "RefusesKeyWithNoBreakSpace", key: "\u00a0abc-key-123", status: 400, code: response.CodeKeyInvalid},
		{name: "RefusesTelephoneKey", key: "555-123-4567", status: 400, code: response.CodeKeyInvalid},
		{name: "RefusesDigitsKey", key: "12345678", status: 400, code: response.CodeKeyInvalid},
		{name: "RefusesDottedTelephoneKey", key: "1.555.123.4567", status: 400, code: response.CodeKeyInvalid},
		{name: "RefusesUnterminatedQuotedKey", key: `"abc-key-123`, status: 400, code: response.CodeKeyInvalid},
		{name: "RefusesEmptyQuotedKey", key: `""`, status: 400, code: response.CodeKeyInvalid},
		{name: "RefusesTwoKeys", edits: edits(withHeaders("Idempotency-Key", "abc-key-123", "abc-key-456")), status: 400, code: response.CodeKeyInvalid},

		{name: "RefusesMissingContentType", edits: edits(withoutHeader("Content-Type")), status: 415, code: response.CodeUnsupportedMediaType},
		{name: "RefusesTextContentType", edits: edits(withHeader("Content-Type", "text/plain")), status: 415, code: response.CodeUnsupportedMediaType},
		{name: "RefusesFormContentType", edits: edits(withHeader("Content-Type", "application/x-www-form-urlencoded")), status: 415, code: response.CodeUnsupportedMediaType},

		{name: "RefusesLargeBody", body: padded(max + 1), status: 413, code: response.CodeBodyTooLarge},
		{name: "RefusesLargeChunkedBody", body: padded(max + 1), edits: edits(chunked), status: 413, code: response.CodeBodyTooLarge},
		{name: "RefusesHugeChunkedBody", body: padded(4 * max), edits: edits(chunked), status: 413, code: response.CodeBodyTooLarge},

		{name: "RefusesEmptyBody", body: " ", status: 400, code: response.CodeInvalidJSON},
		{name: "RefusesMalformedJSON", body: `{"email":"ada@example.com",`, status: 400, code: response.CodeInvalidJSON},
		{name: "RefusesSingleQuotes", body: `{'email':'ada@example.com'}`, status: 400, code: response.CodeInvalidJSON},
		{name: "RefusesInvalidUTF8", body: "{\"email\":\"ada@example.com\",\"source\":\"website\",\"name\":\"Ad\xffa\"}", status: 400, code: response.CodeInvalidJSON},
		{name: "RefusesLoneSurrogate", body: `{"email":"ada@example.com","source":"website","name":"\ud800"}`, status: 400, code: response.CodeInvalidJSON},
		{name: "RefusesDuplicateMember", body: `{"email":"ada@example.com","source":"website","email":"eve@example.com"}`, status: 400, code: response.CodeInvalidJSON},
		{name: "RefusesEscapedDuplicateMember", body: `{"email":"ada@example.com","source":"website","\u0065mail":"eve@example.com"}`, status: 400, code: response.CodeInvalidJSON},
		{name: "RefusesDuplicateUTMMember", body: `{"email":"ada@example.com","source":"website","utm":{"a":"1","a":"2"}}`, status: 400, code: response.CodeInvalidJSON},
		{name: "RefusesNestingDeeperThan32", body: nested(lead.MaxJSONDepth + 1), status: 400, code: response.CodeInvalidJSON},
		{name: "RefusesArray", body: `[]`, status: 400, code: response.CodeInvalidJSON},
		{name: "RefusesString", body: `"x"`, status: 400, code: response.CodeInvalidJSON},
		{name: "RefusesNull", body: `null`, status: 400, code: response.CodeInvalidJSON},
		{name: "RefusesNumber", body: `42`, status: 400, code: response.CodeInvalidJSON},
		{name: "RefusesTrailingObject", body: validBody + `{}`, status: 400, code: response.CodeInvalidJSON},
		{name: "RefusesTrailingGarbage", body: validBody + ` x`, status: 400, code: response.CodeInvalidJSON},

		{name: "RefusesUnknownField", body: `{"email":"ada@example.com","source":"website","colour":"blue","Email":"x"}`, status: 422, code: response.CodeUnknownField, fields: []string{"Email", "colour"}},

		// Nested exactly 32 deep is valid JSON: the lead is then judged on
		// its merits (a utm value must be a string).
		{name: "JudgesNesting32OnItsMerits", body: nested(lead.MaxJSONDepth), status: 422, code: response.CodeValidationFailed, fields: []string{"utm.a"}},
		{name: "RefusesEmptyObject", body: `{}`, status: 422, code: response.CodeValidationFailed, fields: []string{"email", "source"}},
		{name: "RefusesNullRequiredFields", body: `{"email":null,"source":null}`, status: 422, code: response.CodeValidationFailed, fields: []string{"email", "source"}},
		{
			name: "RefusesEveryBrokenRule",
			body: `{"email":"not an address","source":"carrier-pigeon",` +
				`"name":"` + strings.Repeat("n", 201) + `","company":"` + strings.Repeat("c", 201) + `",` +
				`"phone":"` + strings.Repeat("5", 41) + `","website":"ftp://example.com/",` +
				`"message":"` + strings.Repeat("m", 5001) + `",` +
				`"utm":{"campaign":"` + strings.Repeat("u", 201) + `","medium":7},"consent":"yes"}`,
			status: 422, code: response.CodeValidationFailed,
			fields: []string{"company", "consent", "email", "message", "name", "phone", "source", "utm.campaign", "utm.medium", "website"},
		},
		{
			name:   "RefusesWrongTypes",
			body:   `{"email":42,"source":["website"],"name":true,"company":{},"phone":1,"website":false,"message":[],"utm":"x","consent":0}`,
			status: 422, code: response.CodeValidationFailed,
			fields: []string{"company", "consent", "email", "message", "name", "phone", "source", "utm", "website"},
		},
		{name: "RefusesEmptyEmailAndSource", body: `{"email":"","source":""}`, status: 422, code: response.CodeValidationFailed, fields: []string{"email", "source"}},
		{name: "RefusesTwoAddresses", body: `{"email":"ada@example.com, eve@example.com","source":"website"}`, status: 422, code: response.CodeValidationFailed, fields: []string{"email"}},
		{name: "RefusesDisplayName", body: `{"email":"Ada <ada@example.com>","source":"website"}`, status: 422, code: response.CodeValidationFailed, fields: []string{"email"}},
		{name: "RefusesLongEmail", body: `{"email":"` + strings.Repeat("a", 243) + `@example.com","source":"website"}`, status: 422, code: response.CodeValidationFailed, fields: []string{"email"}},
		{name: "RefusesLongSource", body: `{"email":"ada@example.com","source":"` + strings.Repeat("s", 65) + `"}`, status: 422, code: response.CodeValidationFailed, fields: []string{"source"}},
		{name: "RefusesRelativeWebsite", body: `{"email":"ada@example.com","source":"website","website":"/about"}`, status: 422, code: response.CodeValidationFailed, fields: []string{"website"}},
		{name: "RefusesEmptyWebsite", body: `{"email":"ada@example.com","source":"website","website":""}`, status: 422, code: response.CodeValidationFailed, fields: []string{"website"}},
		{name: "RefusesWebsiteWithoutHost", body: `{"email":"ada@example.com","source":"website","website":"https://"}`, status: 422, code: response.CodeValidationFailed, fields: []string{"website"}},
		{name: "RefusesLongWebsite", body: `{"email":"ada@example.com","source":"website","website":"https://example.com/` + strings.Repeat("p", 2030) + `"}`, status: 422, code: response.CodeValidationFailed, fields: []string{"website"}},
		// PostgreSQL's jsonb and text cannot hold U+0000: refused as a
		// broken rule, not a 500 from the database.
		{name: "RefusesNULInEmail", body: `{"email":"ada\u0000@example.com","source":"website"}`, status: 422, code: response.CodeValidationFailed, fields: []string{"email"}},
		{name: "RefusesNULInSource", body: `{"email":"ada@example.com","source":"web\u0000site"}`, status: 422, code: response.CodeValidationFailed, fields: []string{"source"}},
		{
			name: "RefusesNULInEveryOptionalString",
			body: `{"email":"ada@example.com","source":"website","name":"A\u0000","company":"\u0000","phone":"1\u00002",` +
				`"website":"https://example.com/\u0000","message":"hi\u0000","utm":{"campaign":"x\u0000"}}`,
			status: 422, code: response.CodeValidationFailed,
			fields: []string{"company", "message", "name", "phone", "utm.campaign", "website"},
		},
		{name: "RefusesNULInUTMName", body: `{"email":"ada@example.com","source":"website","utm":{"camp\u0000aign":"x"}}`, status: 422, code: response.CodeValidationFailed, fields: []string{"utm"}},
		{name: "RefusesTooManyUTMMembers", body: `{"email":"ada@example.com","source":"website","utm":{` + utmMembers(21) + `}}`, status: 422, code: response.CodeValidationFailed, fields: []string{"utm"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key := cmp.Or(tt.key, testkit.NewKey())
			body := cmp.Or(tt.body, validBody)

			res := api.send(t, api.submission(key, body, tt.edits...))
			apiErr := res.requireError(t, tt.status, tt.code)
			if tt.fields != nil {
				if got := apiErr.fields(); fmt.Sprint(got) != fmt.Sprint(tt.fields) {
					t.Fatalf("details on fields %v, want %v: %s", got, tt.fields, res.Body)
				}
			}
			if tt.status == http.StatusUnauthorized && res.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if !intake.ValidKey(key) {
				return // a request can never claim this key
			}

			// The refusal changed nothing: the key is free for the
			// corrected request.
			if keyStored(t, api.Pool, "a", key) {
				t.Fatal("the refused request stored its key")
			}
			api.send(t, api.submission(key, validBody)).requireAccepted(t, key, false)
		})
	}
}

func edits(e ...func(*http.Request)) []func(*http.Request) { return e }

// utmMembers returns n members "k0":"v",... of a utm object.
func utmMembers(n int) string {
	members := make([]string, n)
	for i := range members {
		members[i] = fmt.Sprintf(`"k%d":"v"`, i)
	}
	return strings.Join(members, ",")
}

func TestSubmitAccepts(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		api *testAPI
		key string
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{api: newTestAPI(t, nil), key: testkit.NewKey()}
	}

	t.Run("AcceptsEveryFieldAtItsLimit", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		body := `{"email":"` + strings.Repeat("a", 242) + `@example.com","source":"referral",` +
			`"name":"` + strings.Repeat("é", 200) + `","company":"` + strings.Repeat("c", 200) + `",` +
			`"phone":"` + strings.Repeat("5", 40) + `","website":"https://example.com/` + strings.Repeat("p", 2028) + `",` +
			`"message":"` + strings.Repeat("m", 5000) + `","utm":{` + utmMembers(20) + `},"consent":true}`
		bundle.api.send(t, bundle.api.submission(bundle.key, body)).requireAccepted(t, bundle.key, false)
	})

	t.Run("AcceptsBodyOfExactlyTheLimit", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		body := validBody + strings.Repeat(" ", intake.DefaultMaxBodyBytes-len(validBody))
		bundle.api.send(t, bundle.api.submission(bundle.key, body)).requireAccepted(t, bundle.key, false)
		other := testkit.NewKey()
		bundle.api.send(t, bundle.api.submission(other, body, chunked)).requireAccepted(t, other, false)
	})

	t.Run("AcceptsNullOptionalFields", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		body := `{"email":"ada@example.com","source":"event","name":null,"company":null,"phone":null,` +
			`"website":null,"message":null,"utm":null,"consent":null}`
		bundle.api.send(t, bundle.api.submission(bundle.key, body)).requireAccepted(t, bundle.key, false)
	})

	t.Run("AcceptsContentTypeParameters", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		req := bundle.api.submission(bundle.key, validBody, withHeader("Content-Type", "Application/JSON; charset=utf-8"))
		bundle.api.send(t, req).requireAccepted(t, bundle.key, false)
	})

	t.Run("AcceptsMatchingClientID", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		req := bundle.api.submission(bundle.key, validBody, withHeader("X-Client-Id", "a"))
		bundle.api.send(t, req).requireAccepted(t, bundle.key, false)
	})

	t.Run("QuotedKeyIsTheBareKey", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		const key = "abc-key-123"
		first := bundle.api.send(t, bundle.api.submission(`"`+key+`"`, validBody)).requireAccepted(t, key, false)
		again := bundle.api.send(t, bundle.api.submission(key, validBody)).requireAccepted(t, key, true)
		if again.LeadID != first.LeadID {
			t.Fatalf("bare key: lead %s, quoted key made %s", again.LeadID, first.LeadID)
		}
		// White space around the header value is not part of the key.
		bundle.api.send(t, bundle.api.submission(" \""+key+"\"\t", validBody)).requireAccepted(t, key, true)
		requireRows(t, bundle.api.Pool, rowCounts{Leads: 1, Keys: 1, Jobs: 1})
	})

	t.Run("ReplaysInProgressWhateverTheFormatting", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		first := bundle.api.send(t, bundle.api.submission(bundle.key, validBody)).requireAccepted(t, bundle.key, false)
		reordered := "{\n  \"name\": \"Ada Lovelace\",\n  \"source\": \"website\",\n  \"email\": \"ada@\\u0065xample.com\"\n}\n"
		again := bundle.api.send(t, bundle.api.submission(bundle.key, reordered)).requireAccepted(t, bundle.key, true)
		if again.LeadID != first.LeadID {
			t.Fatalf("replay: lead %s, want %s", again.LeadID, first.LeadID)
		}
		requireRows(t, bundle.api.Pool, rowCounts{Leads: 1, Keys: 1, Jobs: 1})
	})

	t.Run("RefusesOtherPayloadInProgress", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.api.send(t, bundle.api.submission(bundle.key, validBody)).requireAccepted(t, bundle.key, false)
		res := bundle.api.send(t, bundle.api.submission(bundle.key, `{"email":"eve@example.com","source":"website"}`))
		res.requireError(t, http.StatusUnprocessableEntity, response.CodeKeyReused)
		if res.Header.Get("Idempotent-Replayed") != "" {
			t.Error("a 422 idempotency_key_reused says Idempotent-Replayed")
		}
		requireRows(t, bundle.api.Pool, rowCounts{Leads: 1, Keys: 1, Jobs: 1})
	})
}

func TestClientsAreIsolated(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		api *testAPI
		key string
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{api: newTestAPI(t, nil), key: testkit.NewKey()}
	}
	asB := withHeader("Authorization", "Bearer "+tokenB)

	t.Run("SameKeyMakesIndependentLeads", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		a := bundle.api.send(t, bundle.api.submission(bundle.key, validBody)).requireAccepted(t, bundle.key, false)
		b := bundle.api.send(t, bundle.api.submission(bundle.key, validBody, asB)).requireAccepted(t, bundle.key, false)
		if a.LeadID == b.LeadID {
			t.Fatalf("both clients got lead %s", a.LeadID)
		}
		requireRows(t, bundle.api.Pool, rowCounts{Leads: 2, Keys: 2, Jobs: 2})

		refs := map[string]string{}
		rows, err := bundle.api.Pool.Query(context.Background(), "SELECT client_id, external_ref FROM leads")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var client, ref string
			if err := rows.Scan(&client, &ref); err != nil {
				t.Fatal(err)
			}
			refs[client] = ref
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if refs["a"] == refs["b"] || refs["a"] != intake.ExternalRef("a", bundle.key) || refs["b"] != intake.ExternalRef("b", bundle.key) {
			t.Fatalf("external refs %v, want ExternalRef of each client, different", refs)
		}

		// Each client sees its own lead under the shared key.
		for token, want := range map[string]string{tokenA: a.LeadID, tokenB: b.LeadID} {
			var op operationBody
			res := bundle.api.send(t, bundle.api.operation(token, bundle.key))
			if res.Status != http.StatusOK {
				t.Fatalf("GET: %d %s", res.Status, res.Body)
			}
			if err := decodeStrict(res.Body, &op); err != nil {
				t.Fatal(err)
			}
			if op.LeadID != want {
				t.Fatalf("GET: lead %s, want %s", op.LeadID, want)
			}
		}
	})

	t.Run("CannotSeeTheOtherClientsOperation", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		keyA, keyB := testkit.NewKey(), testkit.NewKey()
		bundle.api.send(t, bundle.api.submission(keyA, validBody)).requireAccepted(t, keyA, false)
		bundle.api.send(t, bundle.api.submission(keyB, validBody, asB)).requireAccepted(t, keyB, false)

		bundle.api.send(t, bundle.api.operation(tokenB, keyA)).requireError(t, http.StatusNotFound, response.CodeNotFound)
		bundle.api.send(t, bundle.api.operation(tokenA, keyB)).requireError(t, http.StatusNotFound, response.CodeNotFound)
		for token, key := range map[string]string{tokenA: keyA, tokenB: keyB} {
			if res := bundle.api.send(t, bundle.api.operation(token, key)); res.Status != http.StatusOK {
				t.Fatalf("GET own operation: %d %s", res.Status, res.Body)
			}
		}
	})
}

// A body of thousands of broken members is answered with at most 20
// details: the answer is never a copy of the body, member by member.
func TestValidationDetailsAreCapped(t *testing.T) {
	t.Parallel()
	api := newTestAPI(t, nil)
	var members []string
	for i := 0; len(strings.Join(members, ",")) < 60_000; i++ {
		members = append(members, fmt.Sprintf(`"q%05d":1`, i))
	}
	for code, body := range map[response.Code]string{
		response.CodeUnknownField:     `{"email":"ada@example.com","source":"website",` + strings.Join(members, ",") + `}`,
		response.CodeValidationFailed: `{"email":"ada@example.com","source":"website","fields":{` + strings.Join(members, ",") + `}}`,
	} {
		res := api.send(t, api.submission(testkit.NewKey(), body))
		apiErr := res.requireError(t, http.StatusUnprocessableEntity, code)
		if n := len(apiErr.Error.Details); n != 20 {
			t.Errorf("%s: %d details for %d broken members, want 20", code, n, len(members))
		}
		if len(res.Body) > 4096 {
			t.Errorf("%s: an answer of %d bytes to a body of %d", code, len(res.Body), len(body))
		}
	}
}
