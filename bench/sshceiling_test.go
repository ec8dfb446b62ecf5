package bench

import (
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// sshLibraryCat is the ceiling of BenchmarkSSHCat's path without the relay:
// the SSH library coder's CLI and agent use (x/crypto/ssh, default
// algorithms: AES-128-GCM), client and server in this process on loopback
// TCP, the server copying file into an exec session's stdout as the agent
// does for `cat`, the client reading it to io.Discard. It returns the time
// the client took to read the whole file.
func sshLibraryCat(b *testing.B, file string) time.Duration {
	b.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		b.Fatal(err)
	}
	server := &ssh.ServerConfig{NoClientAuth: true}
	server.AddHostKey(signer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, chans, reqs, err := ssh.NewServerConn(c, server)
		if err != nil {
			return
		}
		go ssh.DiscardRequests(reqs)
		for nc := range chans {
			ch, chReqs, err := nc.Accept()
			if err != nil {
				return
			}
			go func() {
				for req := range chReqs {
					_ = req.Reply(req.Type == "exec", nil)
					if req.Type != "exec" {
						continue
					}
					go func() {
						defer ch.Close()
						f, err := os.Open(file)
						if err != nil {
							return
						}
						defer f.Close()
						_, _ = io.Copy(ch, f)
						_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{0}))
					}()
				}
			}()
		}
	}()
	client, err := ssh.Dial("tcp", ln.Addr().String(), &ssh.ClientConfig{User: "bench", HostKeyCallback: ssh.InsecureIgnoreHostKey()})
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	sess, err := client.NewSession()
	if err != nil {
		b.Fatal(err)
	}
	out, err := sess.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := sess.Start("cat"); err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, out); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	if err := sess.Wait(); err != nil {
		b.Fatal(err)
	}
	return took
}
