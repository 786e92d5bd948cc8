// Command prog is the macos-native driver's test workload.
//
//	prog serve        append a line to $EINSORA_DATA/boots, then run until SIGTERM
//	prog ignore-term  ignore SIGTERM, write $EINSORA_DATA/ready, run until killed
//	prog exit N       exit with code N
//	prog report ...   write its arguments, $GREETING, $TOKEN and working
//	                  directory to $EINSORA_DATA/report.json, then exit 0
//	prog spew N       write N lines of about 1 KB to stdout, wait 300ms,
//	                  write "done" and exit 0
//	prog alloc N      after 300ms (time for the driver to set its limits)
//	                  touch N MiB, then exit 0
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: prog serve|ignore-term|exit N")
		os.Exit(2)
	}
	data := os.Getenv("EINSORA_DATA")
	switch os.Args[1] {
	case "serve":
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		f, err := os.OpenFile(filepath.Join(data, "boots"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Fprintf(f, "boot %d\n", os.Getpid())
		f.Close()
		fmt.Println("serving")
		<-term
		fmt.Println("terminated")
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		if err := os.WriteFile(filepath.Join(data, "ready"), []byte("ready"), 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for {
			time.Sleep(time.Hour)
		}
	case "exit":
		code := 0
		if len(os.Args) > 2 {
			code, _ = strconv.Atoi(os.Args[2])
		}
		os.Exit(code)
	case "report":
		wd, _ := os.Getwd()
		b, _ := json.Marshal(map[string]any{"args": os.Args[1:], "greeting": os.Getenv("GREETING"),
			"token": os.Getenv("TOKEN"), "cwd": wd, "data": data})
		if err := os.WriteFile(filepath.Join(data, "report.json"), b, 0o600); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "spew":
		n, _ := strconv.Atoi(os.Args[2])
		w := bufio.NewWriter(os.Stdout)
		for i := range n {
			fmt.Fprintf(w, "%05d %01000d\n", i, 0)
		}
		w.Flush()
		time.Sleep(300 * time.Millisecond)
		fmt.Println("done")
	case "alloc":
		time.Sleep(300 * time.Millisecond)
		n, _ := strconv.Atoi(os.Args[2])
		for range n {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = 1
			}
			hold = append(hold, b)
		}
		fmt.Println("allocated", len(hold), "MiB")
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", os.Args[1])
		os.Exit(2)
	}
}

var hold [][]byte
