// The E2B JavaScript SDK, unchanged, against airlock's E2B listener: E2B_API_URL and
// E2B_SANDBOX_URL point at it and E2B_API_KEY is an airlock API key. Each step prints one JSON
// line {step, value}; the Go test (e2e/e2b_test.go) checks them and the audit trail.
//
//   node sdk.mjs run T1 T2      the whole walk through; T1 and T2 are task tokens of one
//                               task, for a sandbox paused and resumed
//   node sdk.mjs bench N API    N runs of `true` through the SDK, and through airlock's own
//                               HTTP API from this same process: the exec endpoint, with
//                               `true` and with the SDK's login shell, and that shell as a
//                               background process (start, then wait for its end)
import { Sandbox, CommandExitError, NotFoundError, SandboxError } from 'e2b'

const say = (step, value) => console.log(JSON.stringify({ step, value }))
const caught = async (f) => {
  try {
    return { ok: await f() }
  } catch (e) {
    return { error: e.name, message: e.message, exitCode: e.exitCode, stdout: e.stdout, stderr: e.stderr }
  }
}

async function run(tokens) {
  // Refusals first: airlock denies by default, and says how to grant.
  say('refuse_internet', await caught(() => Sandbox.create('default', { allowInternetAccess: true })))
  say('refuse_denyout', await caught(() => Sandbox.create('default', { network: { denyOut: ['0.0.0.0/0'] } })))
  say('refuse_secret_env', await caught(() => Sandbox.create('default', { envs: { GITHUB_TOKEN: 'ghp_x' } })))

  const sbx = await Sandbox.create('default', {
    timeoutMs: 120_000,
    metadata: { suite: 'e2b-sdk' },
    envs: { GREETING: 'hello from envs' },
    network: { allowOut: ['api.example.test=demo'] },
  })
  say('created', { id: sbx.sandboxId })
  say('running', await sbx.isRunning())
  const info = await sbx.getInfo()
  say('info', { templateId: info.templateId, state: info.state, metadata: info.metadata, endAt: info.endAt })

  // Commands: streamed output, the environment, a non-zero exit raising CommandExitError.
  const chunks = []
  const r = await sbx.commands.run('echo one; sleep 0.3; echo two; echo to-stderr >&2', { onStdout: (d) => chunks.push(d) })
  say('run', { stdout: r.stdout, stderr: r.stderr, exitCode: r.exitCode, chunks: chunks.length })
  say('run_env', (await sbx.commands.run('echo "$GREETING" from $(pwd)')).stdout)
  say('run_fail', await caught(() => sbx.commands.run('echo partial; exit 3')))

  // Files: write (multipart, octet-stream, gzip, several at once), read, list, stat, folders.
  say('write', await sbx.files.write('notes/hello.txt', 'hello, file\n'))
  say('write_octet', await sbx.files.write('notes/octet.txt', 'octet body', { useOctetStream: true }))
  say('write_gzip', await sbx.files.write('notes/gzip.txt', 'gzip body', { gzip: true }))
  say('write_many', await sbx.files.write([{ path: 'many/a.txt', data: 'A' }, { path: 'many/b.txt', data: 'B' }]))
  say('read', await sbx.files.read('notes/hello.txt'))
  say('read_gzip', await sbx.files.read('notes/gzip.txt'))
  say('read_missing', await caught(() => sbx.files.read('notes/missing.txt')))
  say('list', (await sbx.files.list('notes')).map((e) => ({ name: e.name, type: e.type, size: e.size })))
  say('exists', [await sbx.files.exists('notes/hello.txt'), await sbx.files.exists('nope.txt')])
  say('info_file', await sbx.files.getInfo('notes/hello.txt'))
  say('make_dir', [await sbx.files.makeDir('made/deep'), await sbx.files.makeDir('made/deep')])
  say('rename', await sbx.files.rename('notes/octet.txt', 'made/renamed.txt'))
  await sbx.files.remove('many')
  say('removed', await sbx.files.exists('many/a.txt'))
  say('outside', await caught(() => sbx.files.read('/etc/passwd')))
  say('run_reads_file', (await sbx.commands.run('cat made/renamed.txt')).stdout)

  // A folder watched while a command writes in it.
  const seen = []
  const watch = await sbx.files.watchDir('made', (ev) => seen.push({ name: ev.name, type: ev.type }))
  await sbx.commands.run('echo new > made/watched.txt')
  for (let i = 0; i < 50 && !seen.some((e) => e.name === 'watched.txt'); i++) await new Promise((r) => setTimeout(r, 100))
  await watch.stop()
  say('watch', seen)

  // A background process: left, listed, reconnected to, killed.
  const bg = await sbx.commands.run('for i in $(seq 1 400); do echo tick $i; sleep 0.05; done', { background: true })
  await new Promise((r) => setTimeout(r, 300))
  await bg.disconnect()
  const listed = (await sbx.commands.list()).map((p) => p.pid)
  const later = []
  const again = await sbx.commands.connect(bg.pid, { onStdout: (d) => later.push(d) })
  for (let i = 0; i < 50 && later.length === 0; i++) await new Promise((r) => setTimeout(r, 100))
  const killed = await sbx.commands.kill(bg.pid)
  const ended = await caught(() => again.wait())
  say('background', { pid: bg.pid, listed: listed.includes(bg.pid), reconnected: later.join('').includes('tick'),
    killed, killedAgain: await sbx.commands.kill(bg.pid), ended: ended.error ?? 'no error' })

  // stdin: sent, closed, read to its end.
  const cat = await sbx.commands.run('cat', { background: true, stdin: true })
  await sbx.commands.sendStdin(cat.pid, 'typed in\n')
  await sbx.commands.closeStdin(cat.pid)
  say('stdin', (await cat.wait()).stdout)

  // A terminal.
  const dec = new TextDecoder()
  let screen = ''
  const term = await sbx.pty.create({ cols: 100, rows: 30, onData: (d) => { screen += dec.decode(d) } })
  // The resize is applied by a command in the sandbox once Update answers: the shell waits a
  // second before it reads its size.
  await sbx.pty.resize(term.pid, { cols: 120, rows: 40 })
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode('sleep 1; stty size; echo pty-$((6*7))\nexit\n'))
  say('pty', { result: await caught(() => term.wait()), sawOutput: screen.includes('pty-42'), size: screen.includes('40 120') })

  // The one way out: an allowed request gets the injected credential; a denied one is
  // explained, and the explanation reaches the SDK's error.
  say('allowed', (await sbx.commands.run('curl -sS https://api.example.test/whoami')).stdout)
  say('denied', await caught(() => sbx.commands.run('curl -sS --fail-with-body http://evil.example/')))

  await sbx.setTimeout(300_000)
  say('timeout', (await sbx.getInfo()).endAt)
  say('listed', (await Sandbox.list({ query: { metadata: { suite: 'e2b-sdk' } } }).nextItems()).map((s) => s.sandboxId))

  // Pause and resume, of a sandbox bound to a task token of the test's (the first): pause keeps
  // its files and answers true, the paused sandbox is paused and not running, a second pause is
  // false, connect without a token says what it needs, and connect with another token of the
  // same task in X-Airlock-Token (the second) resumes it, its files back.
  const held = await Sandbox.create('default', { headers: { 'X-Airlock-Token': tokens[0] } })
  await held.files.write('kept.txt', 'kept across the pause\n')
  say('held', held.sandboxId)
  say('pause', await caught(() => held.pause()))
  say('paused', { state: (await held.getInfo()).state, running: await held.isRunning() })
  say('pause_again', await caught(() => held.pause()))
  say('connect_no_token', await caught(() => Sandbox.connect(held.sandboxId)))
  const back = await Sandbox.connect(held.sandboxId, { headers: { 'X-Airlock-Token': tokens[1] } })
  say('resumed', { id: back.sandboxId, running: await back.isRunning(), read: await back.files.read('kept.txt'),
    run: (await back.commands.run('cat kept.txt')).stdout })
  await back.kill()

  // The python template.
  const py = await Sandbox.create('python')
  say('python', (await py.commands.run('python3 -c "print(6*7)"')).stdout)
  say('python_id', py.sandboxId)
  await py.kill()

  say('killed', await sbx.kill())
  say('killed_again', await Sandbox.kill(sbx.sandboxId))
  say('running_after', await sbx.isRunning())
  say('connect_after', await caught(() => Sandbox.connect(sbx.sandboxId)))
}

// bench: `true` N times through the SDK and through airlock's own exec endpoint, from this
// process, one after another on the same warm sandbox; prints the latencies in ms.
async function bench(n, api, key) {
  const sbx = await Sandbox.create('default')
  const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))] }
  const time = async (f) => { const out = []; for (let i = 0; i < n; i++) { const t = performance.now(); await f(); out.push(performance.now() - t) } return out }
  await sbx.commands.run('true')
  const sdk = await time(() => sbx.commands.run('true'))
  const call = async (method, path, body) => {
    const res = await fetch(`${api}/v1/leases/${sbx.sandboxId}${path}`, {
      method, headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
      body: body && JSON.stringify(body),
    })
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status}`)
    return res
  }
  const exec = (cmd) => async () => { await (await call('POST', '/exec', { cmd })).arrayBuffer() }
  // airlock's own exec of `true`; of the login shell the SDK runs; and that shell as the
  // adapter runs it (a background process, then its end).
  const login = ['/bin/bash', '-l', '-c', 'true']
  const own = await time(exec(['true']))
  const ownLogin = await time(exec(login))
  const ownProcess = await time(async () => {
    const p = await (await call('POST', '/processes', { cmd: login })).json()
    await (await call('GET', `/processes/${p.id}/wait?timeout=30s`)).arrayBuffer()
  })
  await sbx.kill()
  say('bench', {
    n, sdk_p50: pct(sdk, 0.5), sdk_p99: pct(sdk, 0.99), api_p50: pct(own, 0.5), api_p99: pct(own, 0.99),
    api_login_p50: pct(ownLogin, 0.5), api_login_p99: pct(ownLogin, 0.99),
    api_process_p50: pct(ownProcess, 0.5), api_process_p99: pct(ownProcess, 0.99),
  })
}

const [mode, ...args] = process.argv.slice(2)
try {
  if (mode === 'bench') await bench(Number(args[0]), args[1], process.env.E2B_API_KEY)
  else await run(args)
} catch (e) {
  say('fatal', { name: e.name, message: e.message, stack: e.stack })
  process.exitCode = 1
}
