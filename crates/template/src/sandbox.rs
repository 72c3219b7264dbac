//! Templates run in a process of their own. A template's work cannot be
//! bounded from inside the process that runs it: minijinja's fuel counts
//! instructions, not the work of a filter or an operator (`([0]*10**12)|sum`
//! is one instruction; `"x" * 10**8 ~ …` allocates gigabytes in a handful),
//! and a thread cannot be stopped. So every render happens in a **renderer**:
//! a child process whose address space the kernel caps
//! ([`TEMPLATE_MEMORY_LIMIT`]) and which the parent kills when a render has
//! used [`TEMPLATE_TIME_LIMIT`] of CPU. A template that would hang, crash or
//! balloon takes down only its renderer; the parent reports the limit it hit
//! and starts another.
//!
//! The renderer is this very program started with [`RENDERER_ARG`]: each
//! binary that renders calls [`serve_if_renderer`] first thing in `main`. A
//! program embedding the producer library does the same, or names another
//! program with [`use_program`] (tests name `hookfleet-producer`) or the
//! `HOOKFLEET_RENDERER` variable. The renderer starts with an empty
//! environment (no database URL, key or token within a template's reach) and
//! greets its parent, so a program that is not a renderer is found at once.
//!
//! Bounds on the parent's side: at most one renderer per core is busy at a
//! time (others wait up to [`RENDER_QUEUE_TIMEOUT`]); a template that hit a
//! limit is not rendered again in the same call (its other documents fail
//! with the same reason); a call gets [`CALL_BUDGET`] of wall time in all.
//!
//! Protocol: frames of a little-endian `u32` length and a JSON document.
//! The renderer sends a hello frame; then the parent sends one request
//! (templates, documents, jobs) and the renderer answers one frame per job,
//! in order, as each finishes, so the parent knows which job was running
//! when a limit was hit.

use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use hookfleet_core::request::{RenderJob, Rendered, Renderer, Templates};
use hookfleet_core::RenderError;

use crate::jinja::{Compiled, CompiledCache};

/// The first argument that makes a hookfleet binary serve as a renderer.
pub const RENDERER_ARG: &str = "__hookfleet-render";

/// The environment variable naming the renderer program (default: this
/// program).
pub const RENDERER_ENV: &str = "HOOKFLEET_RENDERER";

/// The CPU time one render may use. Real templates render in microseconds;
/// a second is a template doing something no webhook needs. CPU, not wall
/// time: a loaded machine does not make an ordinary template fail.
pub const TEMPLATE_TIME_LIMIT: Duration = Duration::from_secs(1);

/// The wall time one render may take however little CPU it got: a render
/// starved this long is given up (the machine is overloaded).
pub const TEMPLATE_WALL_LIMIT: Duration = Duration::from_secs(10);

/// The wall time all the renders of one call may take: a batch of a
/// thousand documents each just under the limit costs this, not a thousand
/// seconds. Jobs left when it runs out fail with the reason.
pub const CALL_BUDGET: Duration = Duration::from_secs(30);

/// How long a call waits for a renderer when every core's is busy.
pub const RENDER_QUEUE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a renderer has to greet its parent after it starts.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// The renderer's address space. A document is at most 4 MiB and a body
/// 1 MiB, and the renderer holds one request's documents and one render at a
/// time; this leaves room for both many times over, and stops a template
/// that would grow to gigabytes at a quarter of one.
pub const TEMPLATE_MEMORY_LIMIT: u64 = 768 * 1024 * 1024;

/// The most document and template bytes sent to a renderer in one request:
/// a 32 MiB ingest batch goes over in a few requests, so the renderer's
/// memory is spent on rendering, not on holding the batch.
pub const REQUEST_BYTES: usize = 8 * 1024 * 1024;

/// The largest frame either side accepts: a request (one document may be
/// 4 MiB, and a request is cut at [`REQUEST_BYTES`] after it), or one job's
/// answer (a body is at most 2 MiB before trimming).
const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;

/// A renderer that outlives a render by this much while its parent has gone
/// (so nobody will kill it) exits by itself.
const ORPHAN_GRACE: Duration = Duration::from_secs(10);

/// How often the parent looks at a busy renderer's CPU time.
const CPU_CHECK_EVERY: Duration = Duration::from_millis(100);

/// What a renderer says first.
const HELLO: &str = "hookfleet-renderer/1";

/// What a renderer says first when it could not confine itself, followed
/// by why; then it exits.
const UNCONFINED: &str = "hookfleet-renderer/1 unconfined: ";

fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

static PROGRAM: RwLock<Option<PathBuf>> = RwLock::new(None);
static IDLE: Mutex<Vec<Process>> = Mutex::new(Vec::new());

/// Renders with `program` (started with [`RENDERER_ARG`]) from now on.
pub fn use_program(program: PathBuf) {
    *PROGRAM.write().expect("renderer program lock") = Some(program);
    // Renderers of another program are not reused.
    IDLE.lock().expect("idle renderers lock").clear();
}

fn program() -> Result<PathBuf, RenderError> {
    if let Some(p) = PROGRAM.read().expect("renderer program lock").clone() {
        return Ok(p);
    }
    if let Some(p) = std::env::var_os(RENDERER_ENV) {
        return Ok(PathBuf::from(p));
    }
    std::env::current_exe()
        .map_err(|e| RenderError::Renderer(format!("cannot find this program to render: {e}")))
}

/// Busy renderers, at most one per core: a flood of requests queues here
/// instead of starting a renderer (of up to 768 MiB) each.
struct Slots {
    busy: Mutex<usize>,
    freed: Condvar,
}

static SLOTS: Slots = Slots {
    busy: Mutex::new(0),
    freed: Condvar::new(),
};

/// A busy renderer's place; freed on drop.
struct Slot;

impl Slot {
    fn take() -> Result<Slot, RenderError> {
        let deadline = Instant::now() + RENDER_QUEUE_TIMEOUT;
        let mut busy = SLOTS.busy.lock().expect("render slots lock");
        while *busy >= cores() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(RenderError::Renderer(format!(
                    "every template renderer stayed busy for {} s",
                    RENDER_QUEUE_TIMEOUT.as_secs()
                )));
            }
            busy = SLOTS
                .freed
                .wait_timeout(busy, left)
                .expect("render slots lock")
                .0;
        }
        *busy += 1;
        Ok(Slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut busy) = SLOTS.busy.lock() {
            *busy -= 1;
        }
        SLOTS.freed.notify_one();
    }
}

/// Renders in renderer processes: the [`Renderer`] every binary that
/// renders hands to request building.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sandbox;

impl Renderer for Sandbox {
    fn render(&self, jobs: &[RenderJob<'_>]) -> Vec<Result<Rendered, RenderError>> {
        render(jobs)
    }
}

type Job<'a> = RenderJob<'a>;

#[derive(Serialize)]
struct Request<'a> {
    templates: Vec<&'a Templates>,
    /// Each document's JSON, serialised once.
    docs: Vec<Box<RawValue>>,
    /// (templates index, docs index) per job.
    jobs: Vec<(usize, usize)>,
}

#[derive(Deserialize)]
struct OwnedRequest {
    templates: Vec<Templates>,
    docs: Vec<Value>,
    jobs: Vec<(usize, usize)>,
}

/// A running renderer. Dropping it kills it.
struct Process {
    child: Child,
    stdin: ChildStdin,
    /// Frames the renderer wrote, read by a thread of their own so the
    /// parent can wait for one with a deadline.
    frames: Receiver<Vec<u8>>,
}

impl Process {
    fn start() -> Result<Process, RenderError> {
        let program = program()?;
        let mut child = Command::new(&program)
            .arg(RENDERER_ARG)
            // Nothing of the parent's environment (a database URL, a key, a
            // token) within a template's reach.
            .env_clear()
            // One malloc arena: the address-space cap then measures what the
            // renderer uses, not what glibc reserves per thread.
            .env("MALLOC_ARENA_MAX", "1")
            // The site's time zone, for `utils.now()` and its kin.
            .env(
                crate::frappe::TIME_ZONE_ENV,
                crate::frappe::time_zone().name(),
            )
            // Its own process group: a Ctrl-C meant for the parent does not
            // kill a render in progress (the parent closes the pipe instead).
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                RenderError::Renderer(format!(
                    "cannot start the template renderer {}: {e}",
                    program.display()
                ))
            })?;
        let stdin = child.stdin.take().expect("piped stdin");
        let mut stdout = child.stdout.take().expect("piped stdout");
        let (tx, frames) = mpsc::channel();
        let reader = std::thread::Builder::new()
            .name("renderer-reader".into())
            .spawn(move || {
                while let Ok(Some(frame)) = read_frame(&mut stdout) {
                    if tx.send(frame).is_err() {
                        return;
                    }
                }
            });
        let renderer = Process {
            child,
            stdin,
            frames,
        };
        if let Err(e) = reader {
            return Err(RenderError::Renderer(format!(
                "cannot start a reader thread: {e}"
            )));
        }
        match renderer.frames.recv_timeout(HELLO_TIMEOUT) {
            Ok(hello) if hello == HELLO.as_bytes() => Ok(renderer),
            Ok(hello) if hello.starts_with(UNCONFINED.as_bytes()) => {
                Err(RenderError::Renderer(format!(
                    "the template renderer cannot confine itself ({}); templates are not rendered without its system-call filter",
                    String::from_utf8_lossy(&hello[UNCONFINED.len()..])
                )))
            }
            _ => Err(RenderError::Renderer(format!(
                "{} did not answer as a template renderer (a program embedding hookfleet calls \
                 hookfleet_template::serve_if_renderer() first in main, or names a renderer \
                 with {RENDERER_ENV})",
                program.display()
            ))),
        }
    }

    /// CPU seconds (user and system) the renderer has used, from the kernel.
    fn cpu_time(&self) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        // Linux reports in USER_HZ, 100 on every platform it runs on.
        Some(Duration::from_millis(ticks * 10))
    }

    /// Kills it and says why it had died, if it had: a renderer killed by
    /// the kernel or aborting on an allocation ran out of memory.
    fn finish(mut self) -> Option<std::process::ExitStatus> {
        let exited = self.child.try_wait().ok().flatten();
        let _ = self.child.kill();
        let status = self.child.wait().ok();
        exited.or(status)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write_frame(out: &mut impl Write, data: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(data.len()).map_err(|_| std::io::Error::other("frame too large"))?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(data)?;
    out.flush()
}

/// The next frame, or None at the end of the stream.
fn read_frame(input: &mut impl Read) -> std::io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match input.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME_BYTES {
        return Err(std::io::Error::other(format!(
            "frame of {len} bytes; at most {MAX_FRAME_BYTES}"
        )));
    }
    let mut data = vec![0u8; len];
    input.read_exact(&mut data)?;
    Ok(Some(data))
}

fn idle_renderer() -> Result<Process, RenderError> {
    let idle = IDLE.lock().expect("idle renderers lock").pop();
    match idle {
        Some(r) => Ok(r),
        None => Process::start(),
    }
}

fn return_renderer(r: Process) {
    let mut idle = IDLE.lock().expect("idle renderers lock");
    if idle.len() < cores() {
        idle.push(r);
    }
}

/// How one job's wait ended.
enum Waited {
    Answer(Vec<u8>),
    /// It used the CPU limit, or the wall limit, or the call's budget.
    TooLong(RenderError),
    /// The renderer died.
    Died,
}

/// Waits for the renderer's next answer while the render uses less than the
/// CPU limit, less than the wall limit, and the call's budget lasts.
fn wait_answer(renderer: &Process, call_deadline: Instant) -> Waited {
    let started = Instant::now();
    let cpu_start = renderer.cpu_time();
    loop {
        match renderer.frames.recv_timeout(CPU_CHECK_EVERY) {
            Ok(frame) => return Waited::Answer(frame),
            Err(RecvTimeoutError::Disconnected) => return Waited::Died,
            Err(RecvTimeoutError::Timeout) => {}
        }
        let cpu_used = match (cpu_start, renderer.cpu_time()) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            // No /proc: wall time stands in for CPU time.
            _ => started.elapsed(),
        };
        if cpu_used >= TEMPLATE_TIME_LIMIT {
            return Waited::TooLong(RenderError::TimeLimit {
                limit_ms: TEMPLATE_TIME_LIMIT.as_millis() as u64,
            });
        }
        if started.elapsed() >= TEMPLATE_WALL_LIMIT || Instant::now() >= call_deadline {
            return Waited::TooLong(RenderError::Renderer(
                "rendering took too long on an overloaded machine".into(),
            ));
        }
    }
}

/// How many times one template may hit a limit within one call before its
/// remaining documents are refused unrendered. A document that trips a
/// limit is its template's bug, and a batch mate of a lone such document
/// deserves its render; but each hit costs a full limit (a second of CPU, a
/// renderer), so a batch of many such documents costs a template this many
/// limits, not one per document.
pub const LIMITS_PER_TEMPLATE_PER_CALL: usize = 2;

/// Renders every job in renderers, each within [`TEMPLATE_TIME_LIMIT`] of
/// CPU and [`TEMPLATE_MEMORY_LIMIT`]; one result per job, in order.
/// [`RenderError::Renderer`] means the renderers, not the template, failed
/// (callers record nothing for it). Blocking: call it from a blocking thread.
pub fn render(jobs: &[Job<'_>]) -> Vec<Result<Rendered, RenderError>> {
    let mut results: Vec<Option<Result<Rendered, RenderError>>> = vec![None; jobs.len()];
    let call_deadline = Instant::now() + CALL_BUDGET;
    // Every limit a template hit in this call. Once it has hit
    // LIMITS_PER_TEMPLATE_PER_CALL, its other documents are not rendered.
    let mut offenders: Vec<(*const Templates, RenderError)> = Vec::new();
    let offence = |offenders: &Vec<(*const Templates, RenderError)>, job: &Job<'_>| {
        let hits: Vec<&RenderError> = offenders
            .iter()
            .filter(|(t, _)| *t == Arc::as_ptr(job.templates))
            .map(|(_, e)| e)
            .collect();
        (hits.len() >= LIMITS_PER_TEMPLATE_PER_CALL).then(|| {
            RenderError::Template(format!(
                "not rendered: this webhook's template hit its limits on {} other documents \
                 of the same batch (last: {})",
                hits.len(),
                hits[hits.len() - 1]
            ))
        })
    };
    // Jobs whose renderer died under them once (see below).
    let mut crashed_once: Vec<usize> = Vec::new();
    let _slot = match Slot::take() {
        Ok(s) => s,
        Err(e) => return jobs.iter().map(|_| Err(e.clone())).collect(),
    };
    let mut next = 0;
    while next < jobs.len() {
        if let Some(e) = offence(&offenders, &jobs[next]) {
            results[next] = Some(Err(e));
            next += 1;
            continue;
        }
        if Instant::now() >= call_deadline {
            results[next] = Some(Err(RenderError::Renderer(format!(
                "the batch's rendering took over {} s",
                CALL_BUDGET.as_secs()
            ))));
            next += 1;
            continue;
        }
        let pending: Vec<usize> = (next..jobs.len())
            .filter(|&i| offence(&offenders, &jobs[i]).is_none())
            .collect();
        let (request, sent) = encode_request(jobs, &pending);
        let renderer = match idle_renderer() {
            Ok(r) => r,
            Err(e) => {
                for r in results.iter_mut().skip(next) {
                    r.get_or_insert_with(|| Err(e.clone()));
                }
                break;
            }
        };
        let mut renderer = renderer;
        if write_frame(&mut renderer.stdin, &request).is_err() {
            // An idle renderer that died meanwhile: start a fresh one.
            drop(renderer);
            match Process::start().and_then(|mut r| {
                write_frame(&mut r.stdin, &request)
                    .map(|_| r)
                    .map_err(|e| RenderError::Renderer(format!("cannot reach the renderer: {e}")))
            }) {
                Ok(r) => renderer = r,
                Err(e) => {
                    for r in results.iter_mut().skip(next) {
                        r.get_or_insert_with(|| Err(e.clone()));
                    }
                    break;
                }
            }
        }
        let mut renderer = Some(renderer);
        for &i in &pending[..sent] {
            let Some(live) = renderer.as_ref() else { break };
            let outcome = match wait_answer(live, call_deadline) {
                Waited::Answer(frame) => {
                    match serde_json::from_slice::<Result<Rendered, RenderError>>(&frame) {
                        Ok(r) => Ok(r),
                        Err(e) => Err(Some(RenderError::Renderer(format!(
                            "unreadable answer from the renderer: {e}"
                        )))),
                    }
                }
                Waited::TooLong(e) => Err(Some(e)),
                Waited::Died => Err(None),
            };
            match outcome {
                Ok(r) => results[i] = Some(r),
                Err(e) => {
                    let status = renderer.take().and_then(Process::finish);
                    let e = match e {
                        Some(limit) => limit,
                        None if died_of_memory(status) => RenderError::MemoryLimit {
                            limit_mib: TEMPLATE_MEMORY_LIMIT >> 20,
                        },
                        // Died of something else while rendering this
                        // job: once may be the machine's doing (a stray
                        // signal), so it is rendered again in a fresh
                        // renderer; twice is the job's.
                        None if !crashed_once.contains(&i) => {
                            crashed_once.push(i);
                            break;
                        }
                        None => RenderError::Crashed(describe_death(status)),
                    };
                    if matches!(
                        e,
                        RenderError::TimeLimit { .. }
                            | RenderError::MemoryLimit { .. }
                            | RenderError::Crashed(_)
                    ) {
                        offenders.push((Arc::as_ptr(jobs[i].templates), e.clone()));
                    }
                    results[i] = Some(Err(e));
                    break;
                }
            }
        }
        if let Some(r) = renderer {
            return_renderer(r);
        }
        next = results
            .iter()
            .position(Option::is_none)
            .unwrap_or(jobs.len());
    }
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(RenderError::Renderer("no answer".into()))))
        .collect()
}

/// How a renderer ended, in words: its exit code, or its signal (a
/// forbidden system call named as such).
fn describe_death(status: Option<std::process::ExitStatus>) -> String {
    const SIGSYS: i32 = 31;
    match status {
        Some(s) if s.signal() == Some(SIGSYS) => {
            "it was killed for a forbidden system call (SIGSYS)".into()
        }
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("it exited with code {code}"),
            (None, Some(sig)) => format!("it was killed by signal {sig}"),
            _ => s.to_string(),
        },
        None => "it ended, its status unknown".into(),
    }
}

/// A renderer that ran out of memory aborts (SIGABRT, on a failed
/// allocation) or is killed by the kernel (SIGKILL, the OOM killer).
fn died_of_memory(status: Option<std::process::ExitStatus>) -> bool {
    const SIGABRT: i32 = 6;
    const SIGKILL: i32 = 9;
    status
        .and_then(|s| s.signal())
        .is_some_and(|sig| sig == SIGABRT || sig == SIGKILL)
}

/// The request for the jobs `pending` (indexes into `jobs`), cut once its
/// documents and templates add up to [`REQUEST_BYTES`] (at least one job),
/// and how many of them it holds. Each document and each template set is
/// sent once however many jobs use it.
fn encode_request(jobs: &[Job<'_>], pending: &[usize]) -> (Vec<u8>, usize) {
    let mut request = Request {
        templates: Vec::new(),
        docs: Vec::new(),
        jobs: Vec::new(),
    };
    let mut template_at: Vec<(*const Templates, usize)> = Vec::new();
    let mut doc_at: Vec<(*const Value, usize)> = Vec::new();
    let mut bytes = 0usize;
    let mut sent = 0;
    for &i in pending {
        let job = &jobs[i];
        let mut added = 0;
        let d_ptr = job.doc as *const Value;
        let doc_text = match doc_at.iter().find(|(p, _)| *p == d_ptr) {
            Some(_) => None,
            None => {
                let text = serde_json::to_string(job.doc).unwrap_or_else(|_| "null".into());
                added += text.len();
                Some(text)
            }
        };
        let t_ptr = Arc::as_ptr(job.templates);
        let new_template = !template_at.iter().any(|(p, _)| *p == t_ptr);
        if new_template {
            added += job.templates.source_len();
        }
        if sent > 0 && bytes + added > REQUEST_BYTES {
            break;
        }
        bytes += added;
        let d = match doc_text {
            Some(text) => {
                let raw = RawValue::from_string(text)
                    .unwrap_or_else(|_| RawValue::from_string("null".into()).expect("JSON"));
                request.docs.push(raw);
                doc_at.push((d_ptr, request.docs.len() - 1));
                request.docs.len() - 1
            }
            None => doc_at
                .iter()
                .find(|(p, _)| *p == d_ptr)
                .map(|(_, i)| *i)
                .unwrap_or(0),
        };
        let t = if new_template {
            request.templates.push(job.templates);
            template_at.push((t_ptr, request.templates.len() - 1));
            request.templates.len() - 1
        } else {
            template_at
                .iter()
                .find(|(p, _)| *p == t_ptr)
                .map(|(_, i)| *i)
                .unwrap_or(0)
        };
        request.jobs.push((t, d));
        sent += 1;
    }
    (serde_json::to_vec(&request).unwrap_or_default(), sent)
}

/// If this process was started as a renderer, serves until its parent
/// closes the pipe and returns the exit code; otherwise returns None at once.
/// Call it first thing in `main`.
pub fn serve_if_renderer() -> Option<std::process::ExitCode> {
    if std::env::args_os().nth(1).as_deref() != Some(std::ffi::OsStr::new(RENDERER_ARG)) {
        return None;
    }
    Some(serve())
}

fn serve() -> std::process::ExitCode {
    // The kernel holds the renderer to its memory, and it never dumps core.
    let _ = rlimit::setrlimit(
        rlimit::Resource::AS,
        TEMPLATE_MEMORY_LIMIT,
        TEMPLATE_MEMORY_LIMIT,
    );
    let _ = rlimit::setrlimit(rlimit::Resource::CORE, 0, 0);
    if let Some(zone) = std::env::var(crate::frappe::TIME_ZONE_ENV)
        .ok()
        .and_then(|z| crate::frappe::parse_time_zone(&z).ok())
    {
        crate::frappe::set_time_zone(zone);
    }
    crate::confine::close_inherited_descriptors();
    // A render running far past its limit means the parent has gone (it
    // would have killed us): exit rather than spin on.
    let busy_since = Arc::new(Mutex::new(None::<Instant>));
    let watched = busy_since.clone();
    let (started, watchdog_up) = mpsc::channel();
    let _ = std::thread::Builder::new()
        .name("renderer-watchdog".into())
        .spawn(move || {
            let _ = started.send(());
            loop {
                std::thread::sleep(TEMPLATE_TIME_LIMIT);
                let since = *watched.lock().unwrap_or_else(|e| e.into_inner());
                if since.is_some_and(|t| t.elapsed() > TEMPLATE_WALL_LIMIT + ORPHAN_GRACE) {
                    std::process::exit(3);
                }
            }
        });
    // Every thread is up (the filter binds them all, and a thread's own
    // start-up would need calls it forbids).
    let _ = watchdog_up.recv_timeout(HELLO_TIMEOUT);
    let mut cache = CompiledCache::default();
    let mut stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    if let Err(reason) = crate::confine::confine() {
        let _ = write_frame(&mut stdout, format!("{UNCONFINED}{reason}").as_bytes());
        return std::process::ExitCode::from(4);
    }
    if write_frame(&mut stdout, HELLO.as_bytes()).is_err() {
        return std::process::ExitCode::from(2);
    }
    loop {
        let frame = match read_frame(&mut stdin) {
            Ok(Some(f)) => f,
            Ok(None) => return std::process::ExitCode::SUCCESS,
            Err(_) => return std::process::ExitCode::from(2),
        };
        let Ok(request) = serde_json::from_slice::<OwnedRequest>(&frame) else {
            return std::process::ExitCode::from(2);
        };
        drop(frame);
        for (t, d) in request.jobs {
            *busy_since.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            let result = match (request.templates.get(t), request.docs.get(d)) {
                (Some(templates), Some(doc)) => match cache.get(templates).as_ref() {
                    Ok(compiled) => render_caught(compiled, doc),
                    Err(e) => Err(e.clone()),
                },
                _ => Err(RenderError::Renderer("malformed request".into())),
            };
            *busy_since.lock().unwrap_or_else(|e| e.into_inner()) = None;
            let answer = serde_json::to_vec(&result).unwrap_or_default();
            if write_frame(&mut stdout, &answer).is_err() {
                return std::process::ExitCode::from(2);
            }
        }
    }
}

/// Renders `doc`, a panic inside the template language (a filter asked
/// for an impossible allocation, say) answered as this job's failure: the
/// renderer, and the batch mates it holds, go on.
fn render_caught(compiled: &Compiled, doc: &Value) -> Result<Rendered, RenderError> {
    caught(|| compiled.render_all(doc))
}

/// `render`'s result, or its panic as [`RenderError::Crashed`].
fn caught(render: impl FnOnce() -> Result<Rendered, RenderError>) -> Result<Rendered, RenderError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(render)) {
        Ok(result) => result,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(RenderError::Crashed(format!("it failed: {what}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_inside_a_render_is_that_jobs_failure() {
        let e = caught(|| panic!("capacity overflow")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the template crashed its renderer: it failed: capacity overflow"
        );
        let owned = caught(|| panic!("{} items", 7)).unwrap_err();
        assert!(owned.to_string().contains("7 items"), "{owned}");
        assert_eq!(caught(|| Ok(Rendered::default())), Ok(Rendered::default()));
    }
}
