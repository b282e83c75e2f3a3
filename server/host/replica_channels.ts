/**
 * The supervisor's side of its workers' direct calls. Every Python replica starts with one extra
 * channel per worker, and a spare for a worker that takes a dead one's place (`_worker.py`'s
 * channels: one socket each, the worker protocol both ways). Each is handed to one worker over
 * node:cluster's IPC channel (the socket travels with the message) once that worker is up, and the
 * worker then calls the replica on it with no hop through this process.
 *
 * What must be owned once stays here: the replica's life (start, stop, kill, its cgroup) and its slots.
 * A worker asks for a slot over the wire (`call_server.ts`) when it kept none from an earlier call
 * (`idle_slots.ts`), and gets one only while a slot is free now on a ready replica of the app's current
 * version whose channel it holds; otherwise it hands the call over as before, and the call waits,
 * scales up or goes to another host as any other. A slot granted so is the pool's own, so concurrency, idle
 * stops, drains and the host's gauges count it.
 */
import type { Worker } from "node:cluster";
import type { Socket } from "node:net";
import type { Logger } from "../log.ts";
import type { PythonReplica, Runtime } from "../runtime/mod.ts";
import type { ChannelSlots, WireSlot } from "./call_server.ts";
import type { ReplicaChannelExited, ReplicaChannelHanded, ReplicaKill } from "./_messages.ts";

/** Channels beyond one per worker: a worker started in a dead one's place gets one of the replicas already up. */
const SPARE_CHANNELS = 1;
/** Workers keep slots (`idle_slots.ts`) of an app whose `replica_concurrency` is at least this many per worker. */
const KEEP_SLOTS_PER_WORKER = 2;

interface Entry {
  id: number;
  replica: PythonReplica;
  /** Channels not handed to a worker yet. */
  free: Socket[];
  /** The workers (node:cluster ids) that were handed one of its channels. */
  holders: Set<number>;
  /** Slots held on it by workers' calls now. */
  slots: number;
}

/** Options of `ReplicaChannels`. */
export interface ReplicaChannelsOptions {
  /** The host's workers (`RUNPLANE_WORKERS`). */
  workers: number;
  logger: Logger;
}

/** Every Python replica's channels, handed to the workers, and the slots the workers call them on. */
export class ReplicaChannels implements ChannelSlots {
  /** How many channels each replica starts with. */
  readonly count: number;
  readonly #workerCount: number;
  readonly #logger: Logger;
  readonly #entries = new Map<number, Entry>();
  readonly #byReplica = new WeakMap<PythonReplica, Entry>();
  /** Workers that asked for their setup (they listen for messages), by node:cluster id. */
  readonly #workers = new Map<number, Worker>();
  #runtime: Runtime | undefined;
  #nextId = 1;

  constructor(options: ReplicaChannelsOptions) {
    this.count = options.workers + SPARE_CHANNELS;
    this.#workerCount = options.workers;
    this.#logger = options.logger;
  }

  /** The runtime's `replicaChannels` option. */
  runtimeOption(): { count: number; onChannels(replica: PythonReplica, channels: readonly Socket[]): void } {
    return { count: this.count, onChannels: (replica, channels) => this.#add(replica, channels) };
  }

  /** The runtime whose slots the workers are granted (set once it is made). */
  attach(runtime: Runtime): void {
    this.#runtime = runtime;
  }

  /** A worker is up and listening: it is handed a channel of every replica it holds none of. */
  workerReady(worker: Worker): void {
    this.#workers.set(worker.id, worker);
    for (const entry of this.#entries.values()) this.#hand(entry, worker);
  }

  /** A worker died: the channels it held went with it. */
  workerGone(worker: Worker): void {
    this.#workers.delete(worker.id);
    for (const entry of this.#entries.values()) entry.holders.delete(worker.id);
  }

  /**
   * A worker asked: the replica of that channel is killed (a call past its time, a protocol broken on
   * it); `ifAlone` (a cancelled call that did not stop) only when that call is the only one in it.
   */
  kill(message: ReplicaKill): void {
    const entry = this.#entries.get(message.replica);
    if (!entry) return;
    const calls = entry.slots + entry.replica.inFlight;
    if (message.ifAlone && calls > 1) {
      // Killing it would fail the other calls: the stuck one runs out (its grace period still applies).
      this.#logger.warn(
        { app: entry.replica.label, pid: entry.replica.pid, calls },
        "cancelled call did not stop; it runs until it ends and its result is discarded",
      );
      return;
    }
    if (message.ifAlone) {
      this.#logger.warn(
        { app: entry.replica.label, pid: entry.replica.pid },
        "cancelled call did not stop; killing its worker",
      );
    }
    entry.replica.kill();
  }

  slot(workerId: number, projectId: string, app: string): WireSlot | null {
    const slot = this.#runtime?.tryChannelSlot(projectId, app);
    if (!slot) return null;
    const entry = this.#byReplica.get(slot.replica);
    if (!entry?.holders.has(workerId)) {
      slot.release();
      return null;
    }
    entry.slots++;
    let released = false;
    const release = () => {
      if (released) return;
      released = true;
      entry.slots--;
      slot.release();
    };
    // Kept slots only where the replica has room for every worker to keep some: with fewer slots (an ML
    // model's replica_concurrency = 1, say) a slot one worker kept would turn the others' calls away.
    const keep = slot.concurrency >= KEEP_SLOTS_PER_WORKER * this.#workerCount;
    return { replica: entry.id, deploymentId: slot.deploymentId, graceMs: slot.graceMs, keep, release };
  }

  #add(replica: PythonReplica, channels: readonly Socket[]): void {
    const entry: Entry = { id: this.#nextId++, replica, free: [...channels], holders: new Set(), slots: 0 };
    this.#entries.set(entry.id, entry);
    this.#byReplica.set(replica, entry);
    for (const worker of this.#workers.values()) this.#hand(entry, worker);
    void replica.exited.then(() => this.#remove(entry));
  }

  #hand(entry: Entry, worker: Worker): void {
    if (entry.holders.has(worker.id) || !worker.isConnected()) return;
    const socket = entry.free.pop();
    if (!socket) return;
    entry.holders.add(worker.id);
    const message: ReplicaChannelHanded = {
      runplane: "replica-channel",
      replica: entry.id,
      label: entry.replica.label,
      pid: entry.replica.pid,
    };
    worker.send(message, socket, (error) => {
      if (!error) return;
      entry.holders.delete(worker.id);
      socket.destroy();
      this.#logger.warn(
        { err: error, worker_pid: worker.process.pid },
        "a replica's channel could not be handed to a worker",
      );
    });
  }

  #remove(entry: Entry): void {
    this.#entries.delete(entry.id);
    for (const socket of entry.free) socket.destroy();
    const exit = entry.replica.exit;
    if (!exit) return;
    const message: ReplicaChannelExited = { runplane: "replica-exit", replica: entry.id, exit };
    for (const id of entry.holders) {
      const worker = this.#workers.get(id);
      // With a callback, a worker that is going away (a drain) makes no 'error' event, which would throw.
      if (worker?.isConnected()) worker.send(message, () => undefined);
    }
  }
}
