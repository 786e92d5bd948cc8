package vz

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The control protocol: one JSON object per line each way, one request per
// connection. The agent sends a Request; the helper answers a Response.
// Lines are at most maxLine bytes; every socket call has a deadline, so a
// helper that hangs or answers garbage costs a bounded wait and gives a
// fixed reason (ReasonHelperUnresponsive, ReasonControlGarbage).

// Ops of a Request.
const (
	OpState = "state" // report the VM's state
	OpStop  = "stop"  // ask the guest to shut down
	OpKill  = "kill"  // stop the VM now
)

// Helper states in a Response.
const (
	HelperBooting    = "booting"
	HelperInstalling = "installing"
	HelperRunning    = "running"
	HelperStopping   = "stopping"
	HelperStopped    = "stopped"
)

// maxLine bounds one line of the protocol.
const maxLine = 4096

// controlTimeout bounds one exchange on the control socket.
const controlTimeout = 2 * time.Second

// Request is what the agent sends.
type Request struct {
	Op string `json:"op"`
}

// Response is what the helper answers.
type Response struct {
	State    string `json:"state"`
	Guest    Guest  `json:"guest,omitempty"`
	Workload string `json:"workload,omitempty"`
	Pid      int    `json:"pid,omitempty"`
	// Progress is the install's percentage while State is installing.
	Progress int    `json:"progress,omitempty"`
	Error    string `json:"error,omitempty"`
}

var errGarbage = errors.New("not a protocol line")

// readLine reads one line of at most maxLine bytes, without its newline.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > maxLine+1 {
			return nil, fmt.Errorf("%w: line over %d bytes", errGarbage, maxLine)
		}
		if err == nil {
			return bytes.TrimSuffix(line, []byte("\n")), nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) && len(line) > 0 {
			return nil, fmt.Errorf("%w: line not terminated", errGarbage)
		}
		return nil, err
	}
}

// DecodeRequest decodes a request line.
func DecodeRequest(line []byte) (Request, error) {
	var q Request
	if err := strictDecode(line, &q); err != nil {
		return Request{}, err
	}
	switch q.Op {
	case OpState, OpStop, OpKill:
		return q, nil
	}
	return Request{}, fmt.Errorf("%w: unknown op %q", errGarbage, q.Op)
}

// DecodeResponse decodes a response line.
func DecodeResponse(line []byte) (Response, error) {
	var p Response
	if err := strictDecode(line, &p); err != nil {
		return Response{}, err
	}
	switch p.State {
	case HelperBooting, HelperInstalling, HelperRunning, HelperStopping, HelperStopped:
	default:
		return Response{}, fmt.Errorf("%w: unknown state %q", errGarbage, p.State)
	}
	if p.Progress < 0 || p.Progress > 100 {
		return Response{}, fmt.Errorf("%w: progress %d", errGarbage, p.Progress)
	}
	if len(p.Error) > 1024 {
		p.Error = p.Error[:1024]
	}
	return p, nil
}

func strictDecode(line []byte, v any) error {
	if len(line) > maxLine {
		return fmt.Errorf("%w: line over %d bytes", errGarbage, maxLine)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", errGarbage, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data", errGarbage)
	}
	return nil
}

// Call sends one request to the helper at socket and returns its answer.
// Errors carry ReasonHelperUnresponsive (no answer in time, or nothing
// listening) or ReasonControlGarbage.
func Call(ctx context.Context, socket string, op string) (Response, error) {
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return Response{}, errorf(ReasonHelperUnresponsive, "control socket: %w", err)
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return Response{}, errorf(ReasonHelperUnresponsive, "control socket: %w", err)
	}
	b, _ := json.Marshal(Request{Op: op})
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return Response{}, errorf(ReasonHelperUnresponsive, "control socket: %w", err)
	}
	line, err := readLine(bufio.NewReaderSize(conn, 512))
	if err != nil {
		if errors.Is(err, errGarbage) {
			return Response{}, errorf(ReasonControlGarbage, "control socket: %w", err)
		}
		return Response{}, errorf(ReasonHelperUnresponsive, "control socket: %w", err)
	}
	resp, err := DecodeResponse(line)
	if err != nil {
		return Response{}, errorf(ReasonControlGarbage, "control socket: %w", err)
	}
	return resp, nil
}

// serveConn answers one connection with handle.
func serveConn(conn net.Conn, handle func(Request) Response) {
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(controlTimeout))
	line, err := readLine(bufio.NewReaderSize(conn, 512))
	if err != nil {
		return
	}
	q, err := DecodeRequest(line)
	var resp Response
	if err != nil {
		resp = handle(Request{Op: OpState})
		resp.Error = err.Error()
	} else {
		resp = handle(q)
	}
	b, _ := json.Marshal(resp)
	_, _ = conn.Write(append(b, '\n'))
}
