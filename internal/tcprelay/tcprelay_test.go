package tcprelay

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// An echo server behind the relay: bytes pass while healed; cut, what a
// client sends is held, nothing reaches the server or comes back, and no
// side is closed; healed, the held bytes arrive and the echo returns.
func TestCutHoldsBytesBothWaysUntilHealed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					got <- sc.Text()
					c.Write([]byte(sc.Text() + "\n"))
				}
			}()
		}
	}()
	r, err := Listen("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rd := bufio.NewReader(c)
	echo := func(line string) {
		t.Helper()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		if back, err := rd.ReadString('\n'); err != nil || back != line+"\n" {
			t.Fatalf("echo of %q: %q, %v", line, back, err)
		}
	}
	echo("before")
	<-got

	r.Cut()
	if _, err := c.Write([]byte("during\n")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); r.Held() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the relay never held the line sent while cut")
		}
	}
	// The relay holds the bytes in its forwarding goroutine, which waits
	// for the heal before it writes: the server cannot have them.
	select {
	case line := <-got:
		t.Fatalf("the server got %q through a cut relay", line)
	default:
	}
	r.Heal()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if back, err := rd.ReadString('\n'); err != nil || back != "during\n" {
		t.Fatalf("after the heal: %q, %v; want the held line echoed on the same connection", back, err)
	}
	if line := <-got; line != "during" {
		t.Fatalf("server got %q", line)
	}
	echo("after")
}

// A connection made while cut is not dialled through until the heal.
func TestCutHoldsNewConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	r, err := Listen("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.Cut()
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Wait until the relay has taken the connection in, then check the
	// server saw nothing.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		r.mu.Lock()
		n := len(r.conns)
		r.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the relay never took the connection in")
		}
	}
	select {
	case <-accepted:
		t.Fatal("a connection made while cut reached the server")
	default:
	}
	r.Heal()
	s := <-accepted
	s.Close()
}
