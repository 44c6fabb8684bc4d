/**
 * One `nonoka bridge` process: spawn it, exchange NDJSON lines, and always reap it.
 *
 * A bridge runs a model step (a fresh one, or a warm one kept by `BridgePool` from an
 * earlier step of the same host session), so this is the code on every turn. It owns the
 * failure modes of a child process (it may not start, may die early, may hang) and turns each
 * into a `BridgeError` naming the command, its exit and the tail of its stderr (where the bridge
 * logs), so a person sees what went wrong without re-running anything. stderr is drained
 * continuously into a bounded buffer: a chatty bridge must neither block on a full pipe nor
 * grow the host's memory. Mirrors `nonoka.provider.process`.
 */

import { spawn, type ChildProcess } from "node:child_process";

/** How much of the bridge's stderr is kept: the end of it, where the failure is. */
export const STDERR_TAIL_BYTES = 8192;

/** The bridge could not start, broke the protocol, ended before `finish`, or ran too long. */
export class BridgeError extends Error {
  readonly command: string[];
  readonly exitCode: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stderrTail: string;
  constructor(
    message: string,
    details: { command: string[]; exitCode?: number | null; signal?: NodeJS.Signals | null; stderrTail?: string },
  ) {
    super(message);
    this.name = "NonokaBridgeError";
    this.command = details.command;
    this.exitCode = details.exitCode ?? null;
    this.signal = details.signal ?? null;
    this.stderrTail = details.stderrTail ?? "";
  }
}

/** `nonoka bridge` as a person would type it (for messages only; nothing runs through a shell). */
export function commandText(command: readonly string[]): string {
  return command.map((arg) => (/^[\w@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, `'"'"'`)}'`)).join(" ");
}

/** The last `limit` bytes written to a stream. */
class Tail {
  private chunks: Buffer[] = [];
  private size = 0;
  truncated = false;
  constructor(readonly limit: number) {}

  feed(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.size += chunk.length;
    if (this.size > this.limit) {
      const all = Buffer.concat(this.chunks);
      this.chunks = [all.subarray(all.length - this.limit)];
      this.size = this.limit;
      this.truncated = true;
    }
  }

  text(): string {
    const text = Buffer.concat(this.chunks).toString("utf8");
    return this.truncated ? `...${text}` : text;
  }
}

type LineWaiter = { resolve: (line: string | null) => void; reject: (error: BridgeError) => void };

/**
 * A running bridge with piped stdin, stdout and stderr.
 *
 * `spawn` never throws: a command that cannot start makes `nextLine` reject with a
 * `BridgeError`, so every failure arrives on the same path.
 */
export class BridgeProcess {
  readonly command: string[];
  private readonly child: ChildProcess;
  private readonly tail: Tail;
  private readonly maxFrameBytes: number;
  private pending: Buffer[] = [];
  private pendingSize = 0;
  private readonly lines: string[] = [];
  private waiters: LineWaiter[] = [];
  private ended = false;
  private broken: BridgeError | undefined;
  private spawnError: Error | undefined;
  private exited = false;
  private readonly exitWaiters: Array<() => void> = [];
  private readonly exitListeners = new Set<() => void>();
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;

  private constructor(command: string[], options: { env: NodeJS.ProcessEnv; cwd: string; maxFrameBytes: number }) {
    this.command = command;
    this.tail = new Tail(STDERR_TAIL_BYTES);
    this.maxFrameBytes = options.maxFrameBytes;
    const [program, ...args] = command;
    this.child = spawn(program ?? "", args, { cwd: options.cwd, env: options.env, stdio: ["pipe", "pipe", "pipe"] });
    this.child.on("error", (error) => {
      // Only spawn failures (ENOENT, EACCES...) land here before the process exists.
      if (this.child.pid === undefined) {
        this.spawnError = error;
        this.fail(
          new BridgeError(
            `could not start the bridge: ${error.message}; bridge command: \`${commandText(command)}\` ` +
              "(check that the command exists and is executable, or set the provider option `command`)",
            { command },
          ),
        );
        this.markExited();
      }
    });
    this.child.stdin?.on("error", () => {
      // EPIPE: the bridge stopped reading (it exited); its exit says why.
    });
    this.child.stdout?.on("data", (chunk: Buffer) => this.onStdout(chunk));
    this.child.stdout?.on("end", () => this.onEnd());
    this.child.stderr?.on("data", (chunk: Buffer) => this.tail.feed(chunk));
    this.child.on("close", (code, signal) => {
      this.exitCode = code;
      this.signalCode = signal;
      this.onEnd();
      this.markExited();
    });
  }

  static spawn(command: string[], options: { env: NodeJS.ProcessEnv; cwd: string; maxFrameBytes: number }): BridgeProcess {
    return new BridgeProcess(command, options);
  }

  get running(): boolean {
    return !this.exited;
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /**
   * Whether the host's event loop waits for this process (default: it does). A warm bridge
   * waiting for the next step is unreferenced, so a host that is done can exit; the bridge
   * then reads end of input and exits too.
   */
  setRef(ref: boolean): void {
    for (const handle of [this.child, this.child.stdin, this.child.stdout, this.child.stderr]) {
      const target = handle as unknown as { ref?: () => void; unref?: () => void } | null;
      try {
        if (ref) target?.ref?.();
        else target?.unref?.();
      } catch {
        // a handle already closed has nothing to hold
      }
    }
  }

  /** Call `listener` once when the process exits (at once if it has); `offExit` forgets it. */
  onExit(listener: () => void): void {
    if (this.exited) {
      listener();
      return;
    }
    this.exitListeners.add(listener);
  }

  offExit(listener: () => void): void {
    this.exitListeners.delete(listener);
  }

  /** Forget lines read but not taken: a warm bridge's next step starts on a clean slate. */
  discardPending(): void {
    this.lines.length = 0;
  }

  get stderrTail(): string {
    return this.tail.text();
  }

  /** Send one frame; `false` when the bridge no longer reads. */
  write(line: string): boolean {
    const stdin = this.child.stdin;
    if (stdin === null || stdin.destroyed || stdin.writableEnded || this.spawnError !== undefined) {
      return false;
    }
    stdin.write(line);
    return true;
  }

  /** Signal end of input; a bridge that finished its request then exits. */
  closeStdin(): void {
    const stdin = this.child.stdin;
    if (stdin !== null && !stdin.destroyed && !stdin.writableEnded) {
      stdin.end();
    }
  }

  /** The next line of stdout (terminator removed), or `null` at end of output. */
  nextLine(): Promise<string | null> {
    const line = this.lines.shift();
    if (line !== undefined) {
      return Promise.resolve(line);
    }
    if (this.broken !== undefined) {
      return Promise.reject(this.broken);
    }
    if (this.ended) {
      return Promise.resolve(null);
    }
    return new Promise((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  /** Wait for the process to exit; `true` when it did within `ms` (`undefined`: no bound). */
  wait(ms?: number): Promise<boolean> {
    if (this.exited) {
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const done = (): void => {
        if (timer !== undefined) clearTimeout(timer);
        resolve(true);
      };
      this.exitWaiters.push(done);
      if (ms !== undefined) {
        timer = setTimeout(() => {
          const at = this.exitWaiters.indexOf(done);
          if (at >= 0) this.exitWaiters.splice(at, 1);
          resolve(false);
        }, ms);
      }
    });
  }

  signal(sig: NodeJS.Signals): void {
    if (!this.exited && this.child.pid !== undefined) {
      try {
        this.child.kill(sig);
      } catch {
        // already gone
      }
    }
  }

  /**
   * End the process politely, then firmly: close stdin, SIGTERM, SIGKILL, `graceMs` apart.
   * SIGTERM lets a bridge save its session first. `signalFirst` skips waiting after closing
   * stdin, for a bridge busy with a request (end of input does not stop one).
   */
  async stop(graceMs: number, signalFirst = false): Promise<void> {
    this.closeStdin();
    if (!signalFirst && (await this.wait(graceMs))) return;
    this.signal("SIGTERM");
    if (await this.wait(graceMs)) return;
    this.signal("SIGKILL");
    await this.wait();
  }

  /** How the process ended, for messages: `exit code 3`, `killed by SIGKILL`, `still running`. */
  describeExit(): string {
    if (this.spawnError !== undefined) return "never started";
    if (!this.exited) return "still running";
    if (this.signalCode !== null) return `killed by ${this.signalCode}`;
    return `exit code ${this.exitCode ?? "unknown"}`;
  }

  /** Stop the process and describe `what` went wrong with its exit and the tail of its stderr. */
  async failure(what: string, graceMs: number, signalFirst = false): Promise<BridgeError> {
    if (this.spawnError !== undefined && this.broken !== undefined) {
      return this.broken;
    }
    await this.stop(graceMs, signalFirst);
    const tail = this.tail.text().trimEnd();
    const message =
      `${what}; bridge command: \`${commandText(this.command)}\`; ${this.describeExit()}; ` +
      (tail ? `stderr (last ${STDERR_TAIL_BYTES} bytes):\n${tail}` : "stderr: (empty)");
    return new BridgeError(message, {
      command: this.command,
      exitCode: this.exitCode,
      signal: this.signalCode,
      stderrTail: tail,
    });
  }

  private onStdout(chunk: Buffer): void {
    let start = 0;
    for (let at = chunk.indexOf(0x0a); at >= 0; at = chunk.indexOf(0x0a, start)) {
      this.pending.push(chunk.subarray(start, at));
      this.pushLine(Buffer.concat(this.pending));
      this.pending = [];
      this.pendingSize = 0;
      start = at + 1;
    }
    if (start < chunk.length) {
      this.pending.push(chunk.subarray(start));
      this.pendingSize += chunk.length - start;
      if (this.pendingSize > this.maxFrameBytes + 1) {
        this.fail(
          new BridgeError(`the bridge wrote a line over the ${this.maxFrameBytes}-byte frame limit`, {
            command: this.command,
          }),
        );
        this.child.stdout?.destroy();
      }
    }
  }

  private pushLine(raw: Buffer): void {
    if (this.broken !== undefined) return;
    let bytes = raw;
    if (bytes.length > 0 && bytes[bytes.length - 1] === 0x0d) bytes = bytes.subarray(0, bytes.length - 1);
    if (bytes.length > this.maxFrameBytes) {
      this.fail(new BridgeError(`the bridge wrote a line over the ${this.maxFrameBytes}-byte frame limit`, { command: this.command }));
      return;
    }
    const line = bytes.toString("utf8");
    if (line.trim() === "") return; // a stray blank line carries nothing
    const waiter = this.waiters.shift();
    if (waiter !== undefined) waiter.resolve(line);
    else this.lines.push(line);
  }

  private onEnd(): void {
    if (this.ended) return;
    if (this.pendingSize > 0 && this.broken === undefined) {
      // A last line without its terminator still counts (the protocol allows it).
      const last = Buffer.concat(this.pending);
      this.pending = [];
      this.pendingSize = 0;
      this.pushLine(last);
    }
    this.ended = true;
    for (const waiter of this.waiters.splice(0)) {
      if (this.broken !== undefined) waiter.reject(this.broken);
      else waiter.resolve(null);
    }
  }

  private fail(error: BridgeError): void {
    if (this.broken !== undefined) return;
    this.broken = error;
    for (const waiter of this.waiters.splice(0)) waiter.reject(error);
  }

  private markExited(): void {
    if (this.exited) return;
    this.exited = true;
    for (const done of this.exitWaiters.splice(0)) done();
    const listeners = [...this.exitListeners];
    this.exitListeners.clear();
    for (const listener of listeners) listener();
  }
}
