// Command testprog is the workload of the docker driver's tests. It is
// built static and put FROM scratch, so it needs nothing in its image.
//
//	testprog serve    append a line to /data/boots, then wait for SIGTERM and exit 0
//	testprog exit N   exit with code N
//	testprog oom      allocate memory until the kernel kills it
//	testprog http     serve on :8080 until SIGTERM: GET /env/NAME answers
//	                  $NAME, GET /cwd the working directory, and
//	                  GET /write?path=P writes P; one line per request to
//	                  stdout
package main

import (
	"fmt"
	"net/http"
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
	case "http":
		serveHTTP()
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

func serveHTTP() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /env/{name}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("get env", r.PathValue("name"))
		fmt.Fprint(w, os.Getenv(r.PathValue("name")))
	})
	mux.HandleFunc("GET /cwd", func(w http.ResponseWriter, r *http.Request) {
		wd, _ := os.Getwd()
		fmt.Fprint(w, wd)
	})
	mux.HandleFunc("GET /write", func(w http.ResponseWriter, r *http.Request) {
		if err := os.WriteFile(r.URL.Query().Get("path"), []byte("written"), 0o644); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	srv := &http.Server{Addr: ":8080", Handler: mux}
	go func() {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		<-stop
		srv.Close()
	}()
	fmt.Println("listening on :8080")
	if err := srv.ListenAndServe(); err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "testprog:", err)
		os.Exit(1)
	}
}
