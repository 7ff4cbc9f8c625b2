package fake_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/leadintake/leadintake/downstream/fake"
)

// A test serves the fake, scripts the lost answer of a CRM upsert, and
// checks what the CRM holds after the caller's retry.
func Example() {
	s := fake.New(nil)
	ts := httptest.NewServer(s)
	defer ts.Close()
	defer s.Close() // before ts.Close: ends any hung request

	s.Script(fake.CRMUpsert, fake.Fault{Status: 503, RetryAfter: "1"}, fake.Fault{DropAfterApply: true})

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for range 3 {
		req, _ := http.NewRequest(http.MethodPut, ts.URL+"/crm/leads/li_ref1",
			bytes.NewBufferString(`{"external_ref":"li_ref1","email":"ada@example.com","score":70,"tier":"warm"}`))
		req.Header.Set("Idempotency-Key", "li_ref1")
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println("broken connection")
			continue
		}
		resp.Body.Close()
		fmt.Printf("%d Retry-After=%q\n", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	rec, _ := s.CRM("li_ref1")
	fmt.Println(rec.IDs, "writes:", rec.Writes)
	// Output:
	// 503 Retry-After="1"
	// broken connection
	// 200 Retry-After=""
	// [crm_000001] writes: 2
}
