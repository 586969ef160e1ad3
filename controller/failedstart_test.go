package controller_test

import (
	"context"
	"strings"
	"testing"

	"mesh/controller"
	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestStart_FailedStartIsNoInstance: a second controller on the same
// store whose address is taken fails to start; it is recorded stopped,
// where /instances listed it "unresponsive" for good, an instance that
// never served.
func TestStart_FailedStartIsNoInstance(t *testing.T) {
	sc := storetest.Config(t, store.Postgres)
	a := mustStart(t, sc, controller.Config{})
	_, err := startOn(t, sc, controller.Config{Listen: a.ctl.Addr.String()})
	if err == nil || !strings.Contains(err.Error(), "the address is in use (another controller, or another program): stop it, or give another --listen") {
		t.Fatalf("a start on a taken address: %v", err)
	}
	is, err := a.ctl.Store.Instances(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(is) != 2 {
		t.Fatalf("%d instances, want the serving one and the failed start", len(is))
	}
	for _, in := range is {
		if in.ID != a.ctl.Instance && in.State != models.InstanceStopped {
			t.Fatalf("the failed start is %s, want stopped", in.State)
		}
	}
}
