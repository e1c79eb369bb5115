package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/lush-agents/lush/internal/identity"
	"github.com/lush-agents/lush/vault/oauth"
)

func newAuthActorKeyCmd() *cobra.Command {
	var project, dir, output string
	cmd := &cobra.Command{
		Use:   "actor-key",
		Short: "Create the key Lush signs actor tokens with (token exchange) and print its public JWK set",
		Long: `actor-key prints the public JWK set of the Ed25519 key the gateway signs actor tokens with:
in a token exchange (lush.yaml flow: token_exchange), the actor token names the agents that act
for the user, and the authorization server that exchanges tokens must trust this key for them.

The key is <dir>/actor.key (PEM, PKCS #8, mode 0600), the file
credentials.oauth.token_exchange.actor.key_file names; when it does not exist, actor-key creates
it (and actor.pub beside it). It never overwrites a key. The JWK set goes to standard output,
with kid the key's RFC 7638 thumbprint, as actor tokens name it.`,
		Example: `  lushctl auth actor-key > actor.jwks.json               # creates .lush/actor.key
  lushctl auth actor-key --dir /run/secrets/lush --output json`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			if dir == "" {
				dir = filepath.Join(project, ".lush")
			}
			key := filepath.Join(dir, "actor.key")
			created := false
			if _, err := os.Lstat(key); errors.Is(err, fs.ErrNotExist) {
				if _, _, err := identity.GenerateKeyPair(dir, "actor.key", "actor.pub"); err != nil {
					return failed("%v", err)
				}
				created = true
			}
			jwks, kid, err := oauth.ActorJWKS(key)
			if err != nil {
				return failed("%v", err)
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), map[string]any{"key_file": key, "created": created, "kid": kid, "jwks": json.RawMessage(jwks)})
			}
			what := "the actor key"
			if created {
				what = "a new actor key"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: %s (kid %s); set credentials.oauth.token_exchange.actor.key_file to it,\n"+
				"and have the authorization server that exchanges tokens trust this JWK set for actor tokens:\n", what, key, kid)
			_, err = cmd.OutOrStdout().Write(jwks)
			return err
		},
	}
	cmd.Flags().StringVarP(&project, "project", "C", ".", "the project directory (the key goes to its .lush unless --dir says otherwise)")
	cmd.Flags().StringVar(&dir, "dir", "", "the directory of actor.key (default <project>/.lush)")
	outputFlag(cmd, &output)
	return cmd
}
