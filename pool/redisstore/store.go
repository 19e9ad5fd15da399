package redisstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/airlock-dev/airlock/binding"
	"github.com/airlock-dev/airlock/pool"
)

// Store implements pool.Store and binding.Source on one Redis key space. Safe for concurrent use.
//
// Keys, under Prefix:
//
//	warm:{node}:{template}   list of sandbox ids, claimed with LPOP (atomic)
//	sandbox:{id}             the sandbox record (JSON)
//	lease:{id}               the lease record (JSON), expiring with the lease
//	leases:{node}            sorted set of the node's lease ids, scored by expiry (ms)
//	tleases:{node}:{tmpl}    set of the node's lease ids of one template, for counting
//	jti:{jti}                the lease a token id binds, expiring with it
//	binding:{node}:{addr}    the binding (JSON), expiring with the lease
//	bindings:{node}          channel of binding.Event
//	node:{node}              the node's API address, expiring unless the node heartbeats
//	node-secret              the deployment's node secret (hex), unless nodes are given one
//	binding-version          the counter that orders every binding change of the deployment
//	ending:{node}            hash of the node's lease ends under way (unbound, sandbox not yet
//	                         destroyed), by sandbox id: what a restart finishes
type Store struct {
	rdb    *redis.Client
	prefix string
}

var (
	_ pool.Store     = (*Store)(nil)
	_ binding.Source = (*Store)(nil)
)

// New returns a store on rdb under prefix (for example "airlock:").
func New(rdb *redis.Client, prefix string) *Store {
	return &Store{rdb: rdb, prefix: prefix}
}

func (s *Store) key(parts ...string) string {
	k := s.prefix
	for i, p := range parts {
		if i > 0 {
			k += ":"
		}
		k += p
	}
	return k
}

// AddWarm registers a warm sandbox.
func (s *Store) AddWarm(ctx context.Context, sb pool.Sandbox) error {
	b, err := json.Marshal(sb)
	if err != nil {
		return err
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.key("sandbox", sb.ID), b, 0)
		p.RPush(ctx, s.key("warm", sb.Node, sb.Template), sb.ID)
		return nil
	})
	return wrap(err)
}

// Claim pops one warm sandbox.
func (s *Store) Claim(ctx context.Context, node, template string) (pool.Sandbox, error) {
	id, err := s.rdb.LPop(ctx, s.key("warm", node, template)).Result()
	if errors.Is(err, redis.Nil) {
		return pool.Sandbox{}, fmt.Errorf("%w for template %q on node %s", pool.ErrNoWarm, template, node)
	}
	if err != nil {
		return pool.Sandbox{}, wrap(err)
	}
	return s.sandbox(ctx, id)
}

func (s *Store) sandbox(ctx context.Context, id string) (pool.Sandbox, error) {
	var sb pool.Sandbox
	b, err := s.rdb.Get(ctx, s.key("sandbox", id)).Bytes()
	if err != nil {
		return sb, wrap(err)
	}
	return sb, json.Unmarshal(b, &sb)
}

// WarmCount counts the warm sandboxes of template on node.
func (s *Store) WarmCount(ctx context.Context, node, template string) (int, error) {
	n, err := s.rdb.LLen(ctx, s.key("warm", node, template)).Result()
	return int(n), wrap(err)
}

// Counts returns node's warm and leased sandboxes of each of templates, read at one instant (a
// MULTI transaction: no claim or bind falls between two of its reads).
func (s *Store) Counts(ctx context.Context, node string, templates []string) ([]int, []int, error) {
	pipe := s.rdb.TxPipeline()
	warm := make([]*redis.IntCmd, len(templates))
	leased := make([]*redis.IntCmd, len(templates))
	for i, t := range templates {
		warm[i] = pipe.LLen(ctx, s.key("warm", node, t))
		leased[i] = pipe.SCard(ctx, s.key("tleases", node, t))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, nil, wrap(err)
	}
	w, l := make([]int, len(templates)), make([]int, len(templates))
	for i := range templates {
		w[i], l[i] = int(warm[i].Val()), int(leased[i].Val())
	}
	return w, l, nil
}

// ListWarm returns node's warm sandboxes.
func (s *Store) ListWarm(ctx context.Context, node string) ([]pool.Sandbox, error) {
	keys, err := s.scan(ctx, s.key("warm", node, "*"))
	if err != nil {
		return nil, err
	}
	var out []pool.Sandbox
	for _, k := range keys {
		ids, err := s.rdb.LRange(ctx, k, 0, -1).Result()
		if err != nil {
			return nil, wrap(err)
		}
		for _, id := range ids {
			sb, err := s.sandbox(ctx, id)
			if err != nil {
				// The record is gone; still report the id so the caller can drop it.
				sb = pool.Sandbox{ID: id, Node: node}
			}
			if sb.Template == "" {
				sb.Template = k[len(s.key("warm", node, "")):]
			}
			out = append(out, sb)
		}
	}
	return out, nil
}

// Forget drops a warm sandbox's records.
func (s *Store) Forget(ctx context.Context, sb pool.Sandbox) error {
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.LRem(ctx, s.key("warm", sb.Node, sb.Template), 0, sb.ID)
		p.Del(ctx, s.key("sandbox", sb.ID))
		return nil
	})
	return wrap(err)
}

func (s *Store) scan(ctx context.Context, match string) ([]string, error) {
	var out []string
	iter := s.rdb.Scan(ctx, 0, match, 256).Iterator()
	for iter.Next(ctx) {
		out = append(out, iter.Val())
	}
	return out, wrap(iter.Err())
}

// recordGrace keeps a lease record this long past its expiry, so the reaper can still find and
// destroy the sandbox of a lease that expired while no node was running. The binding and the
// token id expire with the lease itself.
const recordGrace = time.Hour

// Binding versions come from one counter per deployment, bumped inside each script that changes
// a binding, so every node orders the changes the same way whatever its clock says. The binding
// and its announcement are encoded with versionMark in place of the version; the script writes
// the counter's value there.
const versionMark = `"version":-1`

// bindScript records a lease atomically: the lease id must not be bound already (a resumed
// lease keeps its id, and two resumes of it must not both bind it) and the token id must be
// free, then the lease, its index entry, the token id and the binding are written with the
// lease's expiry, and the binding is announced. It returns the binding's version.
var bindScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[2]) == 1 then
  return redis.error_reply('LEASE_BOUND')
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PXAT', ARGV[5]) == false then
  return redis.error_reply('JTI_IN_USE ' .. redis.call('GET', KEYS[1]))
end
local v = redis.call('INCR', KEYS[8])
local mark = '"version":%-1'
redis.call('SET', KEYS[2], ARGV[2], 'PXAT', ARGV[6])
redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
redis.call('SADD', KEYS[7], ARGV[1])
redis.call('SET', KEYS[4], (string.gsub(ARGV[3], mark, '"version":' .. v, 1)), 'PXAT', ARGV[5])
redis.call('DEL', KEYS[5])
redis.call('PUBLISH', KEYS[6], (string.gsub(ARGV[4], mark, '"version":' .. v, 1)))
return v
`)

// encode returns the stored forms of a lease, its binding and the binding's announcement, the
// last two with versionMark for the version.
func encode(l pool.Lease, b binding.Binding) (lease, bind, event []byte, err error) {
	if lease, err = json.Marshal(l); err != nil {
		return nil, nil, nil, err
	}
	b.Version = -1
	if bind, err = b.Encode(); err != nil {
		return nil, nil, nil, err
	}
	event, err = json.Marshal(binding.Event{Addr: b.Addr, Lease: l.ID, Version: -1, Bound: true})
	if err == nil && (bytes.Count(bind, []byte(versionMark)) != 1 || bytes.Count(event, []byte(versionMark)) != 1) {
		err = errors.New("binding: cannot mark the version") // never: no other field is spelt so
	}
	return lease, bind, event, err
}

// claimScript gives a token id to a holder until a time, unless a lease or another holder has it.
var claimScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PXAT', ARGV[2]) then
  return 1
end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  return 1
end
return redis.error_reply('JTI_IN_USE ' .. tostring(holder))
`)

// ClaimJTI implements pool.Store.
func (s *Store) ClaimJTI(ctx context.Context, jti, holder string, until time.Time) error {
	err := claimScript.Run(ctx, s.rdb, []string{s.key("jti", jti)}, holder, until.UnixMilli()).Err()
	if h, ok := strings.CutPrefix(errText(err), "JTI_IN_USE "); ok {
		return fmt.Errorf("%w: jti %s is held by %s", pool.ErrJTIInUse, jti, h)
	}
	return wrap(err)
}

// unclaimScript deletes a claim its holder holds, and nothing else.
var unclaimScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// Unclaim implements pool.Store: holder gives up its claim of jti.
func (s *Store) Unclaim(ctx context.Context, jti, holder string) error {
	return wrap(unclaimScript.Run(ctx, s.rdb, []string{s.key("jti", jti)}, holder).Err())
}

// ErrAddrBound is what a renewal or token swap of a lease whose address another lease is
// bound to now fails with.
var ErrAddrBound = errors.New("the address is bound to another lease")

// Bind records l and b and announces b, returning the version the binding was given.
func (s *Store) Bind(ctx context.Context, l pool.Lease, b binding.Binding) (int64, error) {
	lb, bb, ev, err := encode(l, b)
	if err != nil {
		return 0, err
	}
	keys := []string{
		s.key("jti", l.JTI), s.key("lease", l.ID), s.key("leases", l.Node),
		s.key("binding", l.Node, b.Addr.String()), s.key("sandbox", l.Sandbox.ID), s.key("bindings", l.Node),
		s.key("tleases", l.Node, l.Template), s.key("binding-version"),
	}
	v, err := bindScript.Run(ctx, s.rdb, keys, l.ID, lb, bb, ev, l.Expires.UnixMilli(), l.Expires.Add(recordGrace).UnixMilli()).Int64()
	if strings.HasPrefix(errText(err), "LEASE_BOUND") {
		return 0, fmt.Errorf("%w: lease %s is bound already, in another sandbox (resumed meanwhile)", pool.ErrLeaseState, l.ID)
	}
	if holder, ok := strings.CutPrefix(errText(err), "JTI_IN_USE "); ok {
		return 0, fmt.Errorf("%w: jti %s is held by %s", pool.ErrJTIInUse, l.JTI, holder)
	}
	return v, wrap(err)
}

// rebindScript replaces a lease that still exists and whose address is still its own (a lease
// whose sandbox stopped gives its address back to the engine, and the lease of the sandbox
// made there binds it: a renewal must not take it back, which would hand that sandbox this
// lease's scopes and credentials): its token id (moved when a token swap brings
// a new one, which must be free), the record, the binding and their expiries, and announces the
// new binding. It returns the binding's version.
var rebindScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[2]) == 0 then
  return redis.error_reply('LEASE_GONE')
end
local held = redis.call('GET', KEYS[3])
if held then
  local ok, b = pcall(cjson.decode, held)
  if not (ok and type(b) == 'table' and b.lease == ARGV[1]) then
    local owner = '?'
    if ok and type(b) == 'table' and type(b.lease) == 'string' then
      owner = b.lease
    end
    return redis.error_reply('ADDR_BOUND ' .. owner)
  end
end
if KEYS[1] ~= KEYS[6] then
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PXAT', ARGV[5]) == false then
    return redis.error_reply('JTI_IN_USE ' .. redis.call('GET', KEYS[1]))
  end
  redis.call('DEL', KEYS[6])
else
  redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[5])
end
local v = redis.call('INCR', KEYS[7])
local mark = '"version":%-1'
redis.call('SET', KEYS[2], ARGV[2], 'PXAT', ARGV[6])
redis.call('SET', KEYS[3], (string.gsub(ARGV[3], mark, '"version":' .. v, 1)), 'PXAT', ARGV[5])
redis.call('ZADD', KEYS[5], ARGV[5], ARGV[1])
redis.call('PUBLISH', KEYS[4], (string.gsub(ARGV[4], mark, '"version":' .. v, 1)))
return v
`)

// Rebind stores l's new token id, expiry and binding b, if the lease still exists, returning the
// version the binding was given. oldJTI is the token id the lease held before (the same for a
// renewal).
func (s *Store) Rebind(ctx context.Context, l pool.Lease, oldJTI string, b binding.Binding) (int64, error) {
	lb, bb, ev, err := encode(l, b)
	if err != nil {
		return 0, err
	}
	keys := []string{s.key("jti", l.JTI), s.key("lease", l.ID), s.key("binding", l.Node, b.Addr.String()),
		s.key("bindings", l.Node), s.key("leases", l.Node), s.key("jti", oldJTI), s.key("binding-version")}
	v, err := rebindScript.Run(ctx, s.rdb, keys, l.ID, lb, bb, ev, l.Expires.UnixMilli(), l.Expires.Add(recordGrace).UnixMilli()).Int64()
	if strings.HasPrefix(errText(err), "LEASE_GONE") {
		return 0, fmt.Errorf("%w: %s", pool.ErrLeaseNotFound, l.ID)
	}
	if owner, ok := strings.CutPrefix(errText(err), "ADDR_BOUND "); ok {
		return 0, fmt.Errorf("%w: address %s of lease %s's sandbox %s is bound to lease %s now (its sandbox stopped, and the engine gave the address to another)",
			ErrAddrBound, b.Addr, l.ID, l.Sandbox.ID, owner)
	}
	if holder, ok := strings.CutPrefix(errText(err), "JTI_IN_USE "); ok {
		return 0, fmt.Errorf("%w: jti %s is held by %s", pool.ErrJTIInUse, l.JTI, holder)
	}
	return v, wrap(err)
}

// GetLease returns lease id.
func (s *Store) GetLease(ctx context.Context, id string) (pool.Lease, error) {
	var l pool.Lease
	b, err := s.rdb.Get(ctx, s.key("lease", id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return l, fmt.Errorf("%w: %s", pool.ErrLeaseNotFound, id)
	}
	if err != nil {
		return l, wrap(err)
	}
	return l, json.Unmarshal(b, &l)
}

// ListLeases returns node's leases, expired ones included until they are unbound.
func (s *Store) ListLeases(ctx context.Context, node string) ([]pool.Lease, error) {
	return s.leasesScored(ctx, node, "+inf")
}

// Expired returns node's leases whose expiry is at or before now, without reading the others.
func (s *Store) Expired(ctx context.Context, node string, now time.Time) ([]pool.Lease, error) {
	return s.leasesScored(ctx, node, strconv.FormatInt(now.UnixMilli(), 10))
}

func (s *Store) leasesScored(ctx context.Context, node, upTo string) ([]pool.Lease, error) {
	ids, err := s.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: s.key("leases", node), Start: "-inf", Stop: upTo, ByScore: true}).Result()
	if err != nil {
		return nil, wrap(err)
	}
	var out []pool.Lease
	for _, id := range ids {
		l, err := s.GetLease(ctx, id)
		if errors.Is(err, pool.ErrLeaseNotFound) {
			// Its record outlived recordGrace: nothing is left to reap but the index entry.
			s.rdb.ZRem(ctx, s.key("leases", node), id)
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// unbindScript removes a lease's binding (only its own: the address may be another lease's
// now), announcing the removal under a new version, then its records, and returns 1; it changes nothing and returns 0 when the lease's record is gone or
// names another sandbox than ARGV[3] (when set): that lease has ended already, or been paused
// and resumed in another sandbox, whose binding and records are not this caller's to remove.
// With KEYS[8] set, the end it begins is journaled there (field ARGV[3], value ARGV[4]) in the
// same step: no crash can leave a lease unbound whose end is not journaled.
var unbindScript = redis.NewScript(`
local rec = redis.call('GET', KEYS[3])
if not rec then
  return 0
end
if ARGV[3] ~= '' then
  local ok, l = pcall(cjson.decode, rec)
  if ok and type(l) == 'table' and type(l.sandbox) == 'table' and l.sandbox.id ~= ARGV[3] then
    return 0
  end
end
if KEYS[1] ~= '' then
  local held = redis.call('GET', KEYS[1])
  local mine = false
  if held then
    local ok, b = pcall(cjson.decode, held)
    mine = ok and type(b) == 'table' and b.lease == ARGV[1]
  end
  if mine then
    local v = redis.call('INCR', KEYS[7])
    redis.call('DEL', KEYS[1])
    redis.call('PUBLISH', KEYS[2], (string.gsub(ARGV[2], '"version":%-1', '"version":' .. v, 1)))
  end
end
redis.call('DEL', KEYS[3])
if KEYS[4] ~= '' then
  redis.call('DEL', KEYS[4])
end
redis.call('ZREM', KEYS[5], ARGV[1])
if KEYS[6] ~= '' then
  redis.call('SREM', KEYS[6], ARGV[1])
end
if KEYS[8] ~= '' then
  redis.call('HSET', KEYS[8], ARGV[3], ARGV[4])
end
return 1
`)

// Unbind removes l's binding (announcing it) and then its records, if l is still the live
// lease of its id; ErrLeaseNotFound, having changed nothing, if not.
func (s *Store) Unbind(ctx context.Context, l pool.Lease) error {
	return s.unbind(ctx, l, nil)
}

// BeginEnd implements pool.Store: Unbind, journaling end under l's node and sandbox in the
// same step.
func (s *Store) BeginEnd(ctx context.Context, l pool.Lease, end []byte) error {
	if l.Sandbox.ID == "" || len(end) == 0 {
		return fmt.Errorf("redisstore: the end of lease %s names no sandbox or nothing to journal", l.ID)
	}
	return s.unbind(ctx, l, end)
}

// Ending implements pool.Store: node's ends under way, by sandbox id.
func (s *Store) Ending(ctx context.Context, node string) (map[string][]byte, error) {
	m, err := s.rdb.HGetAll(ctx, s.key("ending", node)).Result()
	if err != nil {
		return nil, wrap(err)
	}
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = []byte(v)
	}
	return out, nil
}

// Ended implements pool.Store: the end of sandbox on node is over.
func (s *Store) Ended(ctx context.Context, node, sandbox string) error {
	return wrap(s.rdb.HDel(ctx, s.key("ending", node), sandbox).Err())
}

// unbind is Unbind, journaling end when set.
func (s *Store) unbind(ctx context.Context, l pool.Lease, end []byte) error {
	ev, _ := json.Marshal(binding.Event{Addr: l.Sandbox.Addr, Lease: l.ID, Version: -1})
	keys := []string{"", s.key("bindings", l.Node), s.key("lease", l.ID), "", s.key("leases", l.Node), "", s.key("binding-version"), ""}
	if l.Sandbox.Addr.IsValid() {
		keys[0] = s.key("binding", l.Node, l.Sandbox.Addr.String())
	}
	if l.JTI != "" {
		keys[3] = s.key("jti", l.JTI)
	}
	if l.Template != "" {
		keys[5] = s.key("tleases", l.Node, l.Template)
	}
	if end != nil {
		keys[7] = s.key("ending", l.Node)
	}
	n, err := unbindScript.Run(ctx, s.rdb, keys, l.ID, ev, l.Sandbox.ID, end).Int()
	if err != nil {
		return wrap(err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s ended already (released, expired or paused), or runs in another sandbox than %s now", pool.ErrLeaseNotFound, l.ID, l.Sandbox.ID)
	}
	return nil
}

// Lookup implements binding.Source.
func (s *Store) Lookup(ctx context.Context, node string, addr netip.Addr) (binding.Binding, error) {
	b, err := s.rdb.Get(ctx, s.key("binding", node, addr.String())).Bytes()
	if errors.Is(err, redis.Nil) {
		return binding.Binding{}, binding.ErrUnknown
	}
	if err != nil {
		return binding.Binding{}, wrap(err)
	}
	return binding.Decode(b)
}

// Watch implements binding.Source: it follows node's binding channel, pinging to notice a dead
// connection, and returns when the feed breaks so the cache can flush.
func (s *Store) Watch(ctx context.Context, node string, onSync func(), onEvent func(binding.Event)) error {
	ps := s.rdb.Subscribe(ctx, s.key("bindings", node))
	defer ps.Close()
	for {
		msg, err := ps.ReceiveTimeout(ctx, 2*time.Second)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var nerr interface{ Timeout() bool }
			if errors.As(err, &nerr) && nerr.Timeout() {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				perr := ps.Ping(pctx)
				cancel()
				if perr != nil {
					return wrap(perr)
				}
				continue
			}
			return wrap(err)
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				onSync()
			}
		case *redis.Message:
			var ev binding.Event
			if json.Unmarshal([]byte(m.Payload), &ev) == nil {
				onEvent(ev)
			}
		}
	}
}

// errText is err's message, or "" for nil: scripts report their refusals as error replies,
// which Redis may prefix with "ERR ".
func errText(err error) string {
	if err == nil {
		return ""
	}
	return strings.TrimPrefix(err.Error(), "ERR ")
}

func wrap(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("redis: %w", err)
}

// NodeSecret returns the deployment's node secret, which signs node-to-node API calls, making it
// (32 random bytes) if no node has yet. Every node of the deployment gets the same one.
func (s *Store) NodeSecret(ctx context.Context) ([]byte, error) {
	var fresh [32]byte
	if _, err := rand.Read(fresh[:]); err != nil {
		return nil, err
	}
	k := s.key("node-secret")
	if err := s.rdb.SetNX(ctx, k, hex.EncodeToString(fresh[:]), 0).Err(); err != nil {
		return nil, wrap(err)
	}
	v, err := s.rdb.Get(ctx, k).Result()
	if err != nil {
		return nil, wrap(err)
	}
	return hex.DecodeString(v)
}

// Heartbeat records that node is alive and where its API is, for ttl.
func (s *Store) Heartbeat(ctx context.Context, node, api string, ttl time.Duration) error {
	return wrap(s.rdb.Set(ctx, s.key("node", node), api, ttl).Err())
}

// Nodes returns the live nodes and their API addresses.
func (s *Store) Nodes(ctx context.Context) (map[string]string, error) {
	keys, err := s.scan(ctx, s.key("node", "*"))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, k := range keys {
		api, err := s.rdb.Get(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, wrap(err)
		}
		out[strings.TrimPrefix(k, s.key("node", ""))] = api
	}
	return out, nil
}

// Journal is a hash in Redis, under name, of opaque values by id (see vault.Journal).
type Journal struct {
	rdb *redis.Client
	key string
}

// Journal returns the journal called name in this key space.
func (s *Store) Journal(name string) *Journal { return &Journal{rdb: s.rdb, key: s.key(name)} }

// Put stores value under id.
func (j *Journal) Put(ctx context.Context, id string, value []byte) error {
	return j.rdb.HSet(ctx, j.key, id, value).Err()
}

// Get returns the value under id, or nil when there is none.
func (j *Journal) Get(ctx context.Context, id string) ([]byte, error) {
	v, err := j.rdb.HGet(ctx, j.key, id).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}

// Delete removes id.
func (j *Journal) Delete(ctx context.Context, id string) error {
	return j.rdb.HDel(ctx, j.key, id).Err()
}

// All returns every value by id.
func (j *Journal) All(ctx context.Context) (map[string][]byte, error) {
	m, err := j.rdb.HGetAll(ctx, j.key).Result()
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = []byte(v)
	}
	return out, nil
}
