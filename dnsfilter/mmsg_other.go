//go:build !linux

package dnsfilter

import "net"

func (r *Resolver) udpWorker(pc net.PacketConn) { r.udpLoop(pc) }
