package compiler_test

import (
	"os"
	"testing"

	"github.com/lush-agents/lush/test/mcpserver"
)

func TestMain(m *testing.M) {
	mcpserver.ServeStdioIfRequested()
	os.Exit(m.Run())
}
