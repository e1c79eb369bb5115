package identity_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http/httptest"

	"github.com/lush-agents/lush/internal/identity"
)

func Example() {
	digest := sha256.Sum256([]byte("s3cret-ci-key"))
	a, err := identity.New(context.Background(), identity.Config{
		APIKeys: []identity.APIKeyConfig{{
			Name: "ci", SHA256: hex.EncodeToString(digest[:]), Principal: "serviceaccount:ci", Groups: []string{"group:deploy"},
		}},
	})
	if err != nil {
		panic(err)
	}
	defer a.Close()

	r := httptest.NewRequest("POST", "/agents/researcher/mcp", nil)
	r.Header.Set("X-API-Key", "s3cret-ci-key")
	c, err := a.Authenticate(r)
	fmt.Println(c.ID, c.Groups, c.Method, c.Subject, err)

	r.Header.Set("X-API-Key", "wrong")
	_, err = a.Authenticate(r)
	fmt.Println(err.(*identity.Error).Status(), err)
	// Output:
	// serviceaccount:ci [group:deploy] apikey ci <nil>
	// 401 unknown_api_key: the API key in the X-API-Key header is not configured: check the key, or add its SHA-256 under auth.api_keys
}
