package qemu

import (
	"context"
	"testing"
	"time"
)

func TestContAfterMigration(t *testing.T) {
	sock, cmds, _ := fakeQMP(t, map[string]string{
		"cont": `"error": {"class": "GenericError", "desc": "Migration is not finalized yet"}`,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	q, err := dialQMP(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	conts := make(chan int)
	go func() {
		n := 0
		for c := range cmds {
			if c == "cont" {
				n++
			}
		}
		conts <- n
	}()
	// Refused until the deadline: retried, then an error.
	if err := contAfterMigration(ctx, q); err == nil {
		t.Fatal("contAfterMigration succeeded against a QEMU that refuses cont")
	}
	q.Close()
	if n := <-conts; n < 2 {
		t.Fatalf("cont sent %d times, want retries", n)
	}
}
