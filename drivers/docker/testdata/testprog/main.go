// Command testprog is the workload of the docker driver's tests. It is
// built static and put FROM scratch, so it needs nothing in its image.
//
//	testprog serve    append a line to /data/boots, then wait for SIGTERM and exit 0
//	testprog exit N   exit with code N
//	testprog oom      allocate memory until the kernel kills it
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	mode := "serve"
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	switch mode {
	case "serve":
		serve()
	case "exit":
		code := 0
		if len(os.Args) > 2 {
			code, _ = strconv.Atoi(os.Args[2])
		}
		os.Exit(code)
	case "oom":
		oom()
	default:
		fmt.Fprintf(os.Stderr, "testprog: unknown mode %q\n", mode)
		os.Exit(2)
	}
}

func serve() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	// Without a /data mount (a test's foreign container) it just waits.
	if f, err := os.OpenFile("/data/boots", os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "testprog:", err)
	} else {
		fmt.Fprintln(f, time.Now().UTC().Format(time.RFC3339Nano))
		f.Close()
	}
	<-stop
}

var hold [][]byte

func oom() {
	for {
		b := make([]byte, 1<<20)
		for i := range b {
			b[i] = 1 // touch every page so it counts against the limit
		}
		hold = append(hold, b)
	}
}
