package parkconn

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Respond writes a parked request's HTTP/1.1 answer on c by hand (code,
// header, body; Content-Length is set here), within timeout. The deadline
// is cleared again once written, for whoever serves c next.
func Respond(c net.Conn, code int, header http.Header, body []byte, timeout time.Duration) error {
	header.Set("Content-Length", strconv.Itoa(len(body)))
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", code, http.StatusText(code))
	header.Write(&b)
	b.WriteString("\r\n")
	b.Write(body)
	c.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := c.Write(b.Bytes()); err != nil {
		return err
	}
	return c.SetWriteDeadline(time.Time{})
}
