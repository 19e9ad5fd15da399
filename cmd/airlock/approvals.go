package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/airlock-dev/airlock/api/apitype"
)

// cmdApprovals lists the requests held for a reviewer.
func cmdApprovals(args []string) int {
	fs := flag.NewFlagSet("approvals", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print JSON")
	if _, code, ok := parseInterleaved(fs, approvalsUsage, args); !ok {
		return code
	}
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	aps, err := c.Approvals(context.Background())
	if err != nil {
		return fail(err)
	}
	return emit(*asJSON, aps, func() {
		if len(aps) == 0 {
			fmt.Println("no approval is pending")
		}
		for _, a := range aps {
			fmt.Printf("%s  %s %s:%d%s  lease %s (tenant %s, task %s), scope %s, %d waiting, until %s\n", a.ID,
				terminalSafe(a.Method), terminalSafe(a.Host), a.Port, terminalSafe(a.Path), a.Lease, a.Tenant, a.Task,
				terminalSafe(a.Scope), a.Waiting, a.Expires.Local().Format("15:04:05"))
		}
	})
}

// cmdApprove approves a held request, once or for the rest of its lease.
func cmdApprove(args []string) int {
	fs := flag.NewFlagSet("approve", flag.ContinueOnError)
	forWhat := fs.String("for", "once", "once (this request) or lease (every identical request of the lease)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, code, ok := parseInterleaved(fs, approveUsage, args)
	if !ok {
		return code
	}
	if len(pos) != 1 || (*forWhat != "once" && *forWhat != "lease") {
		fmt.Fprint(os.Stderr, approveUsage)
		return 2
	}
	return answer(pos[0], apitype.AnswerRequest{Decision: "approve", For: *forWhat}, *asJSON)
}

// cmdDeny denies a held request, with the reason the sandbox is told.
func cmdDeny(args []string) int {
	fs := flag.NewFlagSet("deny", flag.ContinueOnError)
	reason := fs.String("reason", "", "why (the sandbox is told)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, code, ok := parseInterleaved(fs, denyUsage, args)
	if !ok {
		return code
	}
	if len(pos) != 1 || *reason == "" {
		fmt.Fprint(os.Stderr, denyUsage)
		return 2
	}
	return answer(pos[0], apitype.AnswerRequest{Decision: "deny", Reason: *reason}, *asJSON)
}

func answer(id string, req apitype.AnswerRequest, asJSON bool) int {
	c, err := newClient()
	if err != nil {
		return fail(err)
	}
	a, err := c.Answer(context.Background(), id, req)
	if err != nil {
		return fail(err)
	}
	return emit(asJSON, a, func() {
		fmt.Printf("%s %sd: %s %s:%d%s\n", a.ID, req.Decision, a.Method, a.Host, a.Port, terminalSafe(a.Path))
	})
}

const (
	approvalsUsage = "airlock approvals [--json]\n  the requests held for a reviewer that this key may answer\n"
	approveUsage   = "airlock approve ID [--for once|lease] [--json]\n  lets a held request go on (lease: and every identical one of its lease)\n"
	denyUsage      = "airlock deny ID --reason R [--json]\n  refuses a held request; the sandbox is told the reason\n"
)
