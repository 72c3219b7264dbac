//! Templates run in a process of their own. A template's work cannot be
//! bounded from inside the process that runs it: minijinja's fuel counts
//! instructions, not the work of a filter or an operator (`([0]*10**12)|sum`
//! is one instruction; `"x" * 10**8 ~ …` allocates gigabytes in a handful),
//! and a thread cannot be stopped. So every render happens in a **renderer**:
//! a child process whose address space the kernel caps
//! ([`TEMPLATE_MEMORY_LIMIT`]) and which the parent kills when a render
//! passes its time limit ([`TEMPLATE_TIME_LIMIT`]). A template that would
//! hang, crash or balloon takes down only its renderer; the parent reports
//! the limit it hit and starts another.
//!
//! The renderer is this very program started with [`RENDERER_ARG`]: each
//! binary that renders calls [`serve_if_renderer`] first thing in `main`. A
//! program embedding the producer library does the same, or names another
//! program with [`use_program`] (tests name `hookfleet-producer`) or the
//! `HOOKFLEET_RENDERER` variable.
//!
//! Protocol: frames of a little-endian `u32` length and a JSON document.
//! The parent sends one request (templates, documents, jobs); the renderer
//! answers one frame per job, in order, as each finishes, so the parent
//! knows which job was running when a limit was hit.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::RenderError;
use crate::templates::{CompiledCache, Rendered, Templates};

/// The first argument that makes a hookfleet binary serve as a renderer.
pub const RENDERER_ARG: &str = "__hookfleet-render";

/// The environment variable naming the renderer program (default: this
/// program).
pub const RENDERER_ENV: &str = "HOOKFLEET_RENDERER";

/// The longest one render may take. Real templates render in microseconds;
/// a second is a template doing something no webhook needs.
pub const TEMPLATE_TIME_LIMIT: Duration = Duration::from_secs(1);

/// The time limit for a template that already hit a limit earlier in the same
/// batch: a document-dependent bomb repeated over a batch of a thousand
/// events costs a second once, not a thousand times.
pub const REPEAT_OFFENDER_TIME_LIMIT: Duration = Duration::from_millis(50);

/// The renderer's address space. A document is at most 4 MiB and a body
/// 1 MiB, and the renderer holds one batch's documents and one render at a
/// time; this leaves room for both many times over, and stops a template
/// that would grow to gigabytes at a quarter of one.
pub const TEMPLATE_MEMORY_LIMIT: u64 = 768 * 1024 * 1024;

/// The most document bytes sent to a renderer in one request: a 32 MiB
/// ingest batch goes over in a few requests, so the renderer's memory is
/// spent on rendering, not on holding the batch.
pub const REQUEST_DOCUMENT_BYTES: usize = 8 * 1024 * 1024;

/// The largest frame either side accepts: a request's documents and
/// templates, or one job's answer (a body is at most 2 MiB before trimming).
const MAX_FRAME_BYTES: usize = 64 * 1024 * 1024;

/// A renderer that outlives a render by this much while its parent has gone
/// (so nobody will kill it) exits by itself.
const ORPHAN_GRACE: Duration = Duration::from_secs(10);

/// Renderers kept idle for the next render: one per core covers every
/// render a process runs at once; more would only hold memory.
fn idle_limit() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

static PROGRAM: RwLock<Option<PathBuf>> = RwLock::new(None);
static IDLE: Mutex<Vec<Renderer>> = Mutex::new(Vec::new());

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

/// One render: a webhook's templates on one document.
#[derive(Debug, Clone)]
pub struct Job<'a> {
    pub templates: &'a Arc<Templates>,
    pub doc: &'a Value,
}

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

/// A running renderer.
struct Renderer {
    child: Child,
    stdin: ChildStdin,
    /// Frames the renderer wrote, read by a thread of their own so the
    /// parent can wait for one with a deadline.
    frames: Receiver<Vec<u8>>,
}

impl Renderer {
    fn start() -> Result<Renderer, RenderError> {
        let program = program()?;
        let mut child = Command::new(&program)
            .arg(RENDERER_ARG)
            // One malloc arena: the address-space cap then measures what the
            // renderer uses, not what glibc reserves per thread.
            .env("MALLOC_ARENA_MAX", "1")
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
        std::thread::Builder::new()
            .name("renderer-reader".into())
            .spawn(move || {
                while let Ok(Some(frame)) = read_frame(&mut stdout) {
                    if tx.send(frame).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| RenderError::Renderer(format!("cannot start a reader thread: {e}")))?;
        Ok(Renderer {
            child,
            stdin,
            frames,
        })
    }

    fn kill(mut self) {
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

fn idle_renderer() -> Result<Renderer, RenderError> {
    let idle = IDLE.lock().expect("idle renderers lock").pop();
    match idle {
        Some(r) => Ok(r),
        None => Renderer::start(),
    }
}

fn return_renderer(r: Renderer) {
    let mut idle = IDLE.lock().expect("idle renderers lock");
    if idle.len() < idle_limit() {
        idle.push(r);
    } else {
        drop(idle);
        r.kill();
    }
}

/// Renders every job in renderers, each within [`TEMPLATE_TIME_LIMIT`] and
/// [`TEMPLATE_MEMORY_LIMIT`]; one result per job, in order. Blocking: call
/// it from a blocking thread.
pub fn render(jobs: &[Job<'_>]) -> Vec<Result<Rendered, RenderError>> {
    let mut results: Vec<Result<Rendered, RenderError>> = Vec::with_capacity(jobs.len());
    // Templates that hit a limit in this call: their next jobs get less time.
    let mut offenders: Vec<u64> = Vec::new();
    while results.len() < jobs.len() {
        let start = results.len();
        let (request, end) = encode_request(jobs, start);
        let mut renderer = match idle_renderer() {
            Ok(r) => r,
            Err(e) => {
                results.extend((start..jobs.len()).map(|_| Err(e.clone())));
                break;
            }
        };
        if write_frame(&mut renderer.stdin, &request).is_err() {
            // An idle renderer that died meanwhile: start a fresh one.
            renderer.kill();
            match Renderer::start().and_then(|mut r| {
                write_frame(&mut r.stdin, &request)
                    .map(|_| r)
                    .map_err(|e| RenderError::Renderer(format!("cannot reach the renderer: {e}")))
            }) {
                Ok(r) => renderer = r,
                Err(e) => {
                    results.extend((start..jobs.len()).map(|_| Err(e.clone())));
                    break;
                }
            }
        }
        let mut alive = true;
        for job in &jobs[start..end] {
            let key = job.templates.key();
            let limit = if offenders.contains(&key) {
                REPEAT_OFFENDER_TIME_LIMIT
            } else {
                TEMPLATE_TIME_LIMIT
            };
            match renderer.frames.recv_timeout(limit) {
                Ok(frame) => {
                    match serde_json::from_slice::<Result<Rendered, RenderError>>(&frame) {
                        Ok(r) => results.push(r),
                        Err(e) => {
                            results.push(Err(RenderError::Renderer(format!(
                                "unreadable answer from the renderer: {e}"
                            ))));
                            alive = false;
                            break;
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    offenders.push(key);
                    results.push(Err(RenderError::TimeLimit {
                        limit_ms: limit.as_millis() as u64,
                    }));
                    alive = false;
                    break;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    offenders.push(key);
                    results.push(Err(RenderError::MemoryLimit {
                        limit_mib: TEMPLATE_MEMORY_LIMIT >> 20,
                    }));
                    alive = false;
                    break;
                }
            }
        }
        if alive {
            return_renderer(renderer);
        } else {
            renderer.kill();
        }
    }
    results
}

/// The request for the jobs from `start` on whose documents add up to
/// [`REQUEST_DOCUMENT_BYTES`] (at least one job), and where it ends. Each
/// document and each template set is sent once however many jobs use it.
fn encode_request(jobs: &[Job<'_>], start: usize) -> (Vec<u8>, usize) {
    let mut request = Request {
        templates: Vec::new(),
        docs: Vec::new(),
        jobs: Vec::new(),
    };
    let mut template_at: Vec<(*const Templates, usize)> = Vec::new();
    let mut doc_at: Vec<(*const Value, usize)> = Vec::new();
    let mut bytes = 0usize;
    let mut end = start;
    while end < jobs.len() {
        let job = &jobs[end];
        let d_ptr = job.doc as *const Value;
        let d = match doc_at.iter().find(|(p, _)| *p == d_ptr) {
            Some((_, i)) => *i,
            None => {
                let text = serde_json::to_string(job.doc).unwrap_or_else(|_| "null".into());
                if end > start && bytes + text.len() > REQUEST_DOCUMENT_BYTES {
                    break;
                }
                bytes += text.len();
                let raw = RawValue::from_string(text)
                    .unwrap_or_else(|_| RawValue::from_string("null".into()).expect("JSON"));
                request.docs.push(raw);
                doc_at.push((d_ptr, request.docs.len() - 1));
                request.docs.len() - 1
            }
        };
        let t_ptr = Arc::as_ptr(job.templates);
        let t = match template_at.iter().find(|(p, _)| *p == t_ptr) {
            Some((_, i)) => *i,
            None => {
                request.templates.push(job.templates);
                template_at.push((t_ptr, request.templates.len() - 1));
                request.templates.len() - 1
            }
        };
        request.jobs.push((t, d));
        end += 1;
    }
    (serde_json::to_vec(&request).unwrap_or_default(), end)
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
    // A render running far past its limit means the parent has gone (it
    // would have killed us): exit rather than spin on.
    let busy_since = Arc::new(Mutex::new(None::<Instant>));
    let watched = busy_since.clone();
    let _ = std::thread::Builder::new()
        .name("renderer-watchdog".into())
        .spawn(move || loop {
            std::thread::sleep(TEMPLATE_TIME_LIMIT);
            let since = *watched.lock().expect("watchdog lock");
            if since.is_some_and(|t| t.elapsed() > TEMPLATE_TIME_LIMIT + ORPHAN_GRACE) {
                std::process::exit(3);
            }
        });
    let mut cache = CompiledCache::default();
    let mut stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
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
            *busy_since.lock().expect("watchdog lock") = Some(Instant::now());
            let result = match (request.templates.get(t), request.docs.get(d)) {
                (Some(templates), Some(doc)) => match cache.get(templates).as_ref() {
                    Ok(compiled) => compiled.render_all(doc),
                    Err(e) => Err(e.clone()),
                },
                _ => Err(RenderError::Renderer("malformed request".into())),
            };
            *busy_since.lock().expect("watchdog lock") = None;
            let answer = serde_json::to_vec(&result).unwrap_or_default();
            if write_frame(&mut stdout, &answer).is_err() {
                return std::process::ExitCode::from(2);
            }
        }
    }
}
