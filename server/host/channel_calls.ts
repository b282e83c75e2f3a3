/**
 * A worker's side of its direct calls (see `replica_channels.ts`): the replicas' channels its supervisor
 * handed it, each driven by a `PythonReplica` as the supervisor drives its own pipes (calls, streams and
 * their credits, cancels, output, a protocol broken), and the choice per call between a channel and the
 * hand-over (a slot is kept 20 ms for the next call, `idle_slots.ts`). The supervisor keeps the
 * replica's life: this process asks it to kill one (a call past its time), and learns from it how one
 * ended.
 */
import type { Socket } from "node:net";
import type { Logger } from "../log.ts";
import type { ExecutedCall, ExecuteRequest } from "../runs/mod.ts";
import { type OutputLine, type ProcessExit, PythonReplica, type WorkerProcess } from "../runtime/mod.ts";
import type { SupervisorCalls } from "./call_client.ts";
import { IdleSlots } from "./idle_slots.ts";
import { isReplicaChannelExited, isReplicaChannelHanded, type ReplicaKill } from "./_messages.ts";

/** How long a channel whose peer closed waits for the supervisor to say how its replica ended. */
const EXIT_NOTICE_WAIT_MS = 2_000;
/** How long a slot on a replica whose channel is still on its way (IPC and the wire race) waits for it. */
const CHANNEL_WAIT_MS = 2_000;
/**
 * How long a slot is kept after its call for the next call to the same app (`idle_slots.ts`): long
 * enough to be reused under a steady load, short enough that a slot idle in one worker is soon free for
 * the others (a call queued in the supervisor may wait that much longer for it).
 */
const SLOT_LINGER_MS = 20;

/** Options of `WorkerChannels`. */
export interface WorkerChannelsOptions {
  logger: Logger;
  /** Sends a message to the supervisor (node:cluster's IPC channel). */
  send(message: ReplicaKill): void;
}

interface Held {
  replica: PythonReplica;
  /** Told how the replica ended (the supervisor's word, or the channel's close without one). */
  ended(exit: ProcessExit): void;
}

/** The channels this worker holds, by the supervisor's channel id. */
export class WorkerChannels {
  readonly #options: WorkerChannelsOptions;
  readonly #held = new Map<number, Held>();
  readonly #arriving = new Map<number, Array<() => void>>();
  /** Slots kept a moment after their call, for the next call to the same app. */
  readonly #idle = new IdleSlots({
    lingerMs: SLOT_LINGER_MS,
    usable: (slot) => this.#held.get(slot.replica)?.replica.usable === true,
  });
  #onOutput: (line: OutputLine) => void = () => {};
  /** Told which way each call went (`runplane_worker_calls_total`). */
  onCall: (path: "direct" | "handed_over") => void = () => {};
  /** Whether an app may be called on a channel at all (a Python app); a custom runtime's calls are handed over. */
  callable: (projectId: string, app: string) => boolean = () => true;

  constructor(options: WorkerChannelsOptions) {
    this.#options = options;
  }

  /** Where the output of calls made on the channels goes (the run log). */
  set onOutput(write: (line: OutputLine) => void) {
    this.#onOutput = write;
  }

  /**
   * The supervisor is gone (killed): its replicas die with it, and a call on one of their channels ends
   * as a stopping server ends it (`interrupted`: its function ran, so not a crash to retry), once the
   * channel closes, with no word from the supervisor to wait for.
   */
  supervisorGone(): void {
    for (const held of this.#held.values()) {
      held.ended({ reason: "its supervisor stopped", outOfMemory: false, stopped: true });
    }
  }

  /** Whether it holds any channel (no slot is worth asking for before). */
  get holding(): boolean {
    return this.#held.size > 0;
  }

  /** Takes a supervisor's message about channels; false when it is about something else. */
  receive(message: unknown, handle: unknown): boolean {
    if (isReplicaChannelExited(message)) {
      this.#held.get(message.replica)?.ended({ ...message.exit });
      return true;
    }
    if (!isReplicaChannelHanded(message)) return false;
    const socket = handle as Socket | undefined;
    if (!socket || typeof socket.write !== "function") return true;
    const id = message.replica;
    const process = channelProcess(socket, {
      pid: message.pid,
      kill: () => this.#options.send({ runplane: "replica-kill", replica: id }),
      killIfAlone: () => this.#options.send({ runplane: "replica-kill", replica: id, ifAlone: true }),
    });
    const replica = new PythonReplica({
      label: message.label,
      logger: this.#options.logger,
      onOutput: (line) => this.#onOutput(line),
      start: () => Promise.resolve(process),
      readyOnStart: true,
    });
    this.#held.set(id, { replica, ended: process.ended });
    void replica.exited.then(() => this.#held.delete(id));
    // Its peer closed the channel: the replica ended (the supervisor tells how); no call is sent on it now,
    // where it would wait for an answer until its time ran out.
    socket.once("end", () => (replica.usable = false)).once("close", () => (replica.usable = false));
    for (const wake of this.#arriving.get(id) ?? []) wake();
    this.#arriving.delete(id);
    return true;
  }

  /**
   * Runs `request` on a replica's channel when the supervisor has a slot for it now, else hands it to the
   * supervisor (`calls.execute`), which runs it as it runs any other. `here`: a call another host of the
   * cluster forwarded, handed over as such (a direct call runs on this host's replicas anyway).
   */
  async execute(
    request: ExecuteRequest,
    calls: SupervisorCalls,
    options: { here?: boolean } = {},
  ): Promise<ExecutedCall> {
    const app = `${request.projectId}/${request.app}`;
    // A channel is a Python replica's: a call by another method than POST is the supervisor's to refuse.
    if (request.http) return calls.execute(request, options);
    const slot = this.#idle.take(app)
      ?? (this.holding && this.callable(request.projectId, request.app)
        ? await calls.slot(request.projectId, request.app)
        : null);
    const replica = slot ? await this.#replica(slot.replica) : undefined;
    await replica?.ready.catch(() => undefined);
    if (!slot || !replica?.usable) {
      slot?.release();
      this.onCall("handed_over");
      return calls.execute(request, options);
    }
    this.onCall("direct");
    if (slot.deploymentId !== undefined) request.onDeployment?.(slot.deploymentId);
    return replica.call({
      runId: request.runId,
      functionName: request.functionName,
      kwargs: request.input,
      kwargsJson: request.inputJson,
      graceMs: slot.graceMs,
      signal: request.signal,
      onSettled: () => (slot.keep ? this.#idle.keep(app, slot) : slot.release()),
    });
  }

  /** The replica of channel `id`, waiting a little for one the supervisor handed and that is on its way. */
  async #replica(id: number): Promise<PythonReplica | undefined> {
    const held = this.#held.get(id);
    if (held) return held.replica;
    await new Promise<void>((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        const waiting = this.#arriving.get(id)?.filter((other) => other !== wake) ?? [];
        if (waiting.length) this.#arriving.set(id, waiting);
        else this.#arriving.delete(id);
        resolve();
      }, CHANNEL_WAIT_MS);
      this.#arriving.set(id, [...(this.#arriving.get(id) ?? []), wake]);
    });
    return this.#held.get(id)?.replica;
  }
}

/**
 * A channel as the process of a `PythonReplica`: the socket carries requests and messages both ways;
 * it has ended once the supervisor said how (or, without a word from it, a while after the socket closed).
 */
function channelProcess(
  socket: Socket,
  options: { pid?: number; kill(): void; killIfAlone(): void },
): WorkerProcess & { ended(exit: ProcessExit): void } {
  socket.on("error", () => undefined);
  let told: (exit: ProcessExit) => void = () => {};
  const notice = new Promise<ProcessExit>((resolve) => (told = resolve));
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  socket.once("close", () => {
    setTimeout(() => told({ reason: "its channel closed", outOfMemory: false }), EXIT_NOTICE_WAIT_MS).unref();
  });
  let over = false;
  const exited = Promise.all([notice, closed]).then(([exit]) => {
    over = true;
    return exit;
  });
  return {
    requests: socket,
    messages: socket,
    channels: [],
    pid: options.pid,
    origin: "fork",
    exited,
    // Its peer closed the channel: the replica's process ended (its supervisor tells how).
    hasExited: () => over || socket.readableEnded || socket.destroyed,
    kill: options.kill,
    killIfAlone: options.killIfAlone,
    async stop() {
      socket.destroy();
      await exited;
    },
    ended(exit) {
      told(exit);
      // Whatever it left behind holding the channel is not waited for.
      setTimeout(() => socket.destroy(), EXIT_NOTICE_WAIT_MS).unref();
    },
  };
}
