/**
 * The store's record of replica seats (`replica_seats`): a seat is the right to run one replica of an
 * app, and its primary key (project, app, seat number) is what keeps the cluster within an app's
 * `max_replicas`. A host claims a seat with one guarded upsert (no row, or a row whose holder stopped
 * renewing it), renews the seats it holds at its heartbeat, and deletes them when it stops.
 */
import type { Kysely, Selectable } from "kysely";
import type { Database } from "../store/mod.ts";
import type { ReplicaSeatState, ReplicaSeatTable } from "../store/schema.ts";

/** One seat as the store records it. */
export type SeatRow = Selectable<ReplicaSeatTable>;

/** A seat's key. */
export interface SeatKey {
  projectId: string;
  appId: string;
  seat: number;
}

/** Options of `claimSeat`. */
export interface ClaimSeatRequest {
  projectId: string;
  appId: string;
  /** The claiming host. */
  hostId: string;
  /** How many seats the app has (its `max_replicas`): seats 0 to `limit - 1`. */
  limit: number;
  /** The replica's concurrency. */
  slots: number;
  /** The store's time now. */
  now: number;
  /** A seat renewed before this time is a stopped host's, and may be taken over. */
  staleBefore: number;
}

/**
 * Claims the lowest free seat of an app for `hostId`: one with no row, or whose row was last renewed
 * before `staleBefore`. Each try is one upsert whose update is guarded by that staleness, so among
 * processes claiming at once (on PostgreSQL too) each seat goes to one. Resolves with the seat, or null
 * when all `limit` seats are held by live rows.
 */
export async function claimSeat(db: Kysely<Database>, request: ClaimSeatRequest): Promise<number | null> {
  const { projectId, appId, hostId, now, staleBefore } = request;
  // One read first, so a claim against full seats costs one statement; the upserts alone decide.
  const held = await db
    .selectFrom("replica_seats")
    .select("seat")
    .where("project_id", "=", projectId)
    .where("app_id", "=", appId)
    .where("seen_at", ">=", staleBefore)
    .execute();
  const live = new Set(held.map((row) => row.seat));
  const holder = {
    host_id: hostId,
    state: "starting" as const,
    slots: request.slots,
    busy: 0,
    claimed_at: now,
    seen_at: now,
  };
  for (let seat = 0; seat < request.limit; seat++) {
    if (live.has(seat)) continue;
    const claimed = await db
      .insertInto("replica_seats")
      .values({ project_id: projectId, app_id: appId, seat, ...holder })
      .onConflict((oc) =>
        oc.columns(["project_id", "app_id", "seat"]).doUpdateSet(holder).where(
          "replica_seats.seen_at",
          "<",
          staleBefore,
        )
      )
      .returning("seat")
      .executeTakeFirst();
    if (claimed) return claimed.seat;
  }
  return null;
}

/** Deletes a seat if `hostId` still holds it; resolves with whether it did. */
export async function releaseSeat(db: Kysely<Database>, seat: SeatKey & { hostId: string }): Promise<boolean> {
  const result = await db
    .deleteFrom("replica_seats")
    .where("project_id", "=", seat.projectId)
    .where("app_id", "=", seat.appId)
    .where("seat", "=", seat.seat)
    .where("host_id", "=", seat.hostId)
    .executeTakeFirst();
  return Number(result.numDeletedRows) > 0;
}

/** A seat's renewal: its replica's state and calls in flight. */
export interface SeatRenewal extends SeatKey {
  state: ReplicaSeatState;
  busy: number;
}

/** Options of `renewSeats`. */
export interface RenewSeatsRequest {
  hostId: string;
  now: number;
  seats: SeatRenewal[];
}

/**
 * Renews the seats `hostId` holds (their `seen_at`, state and calls in flight), in one transaction;
 * resolves with those it no longer holds: taken over by another host after a missed lease, or deleted.
 */
export async function renewSeats(db: Kysely<Database>, request: RenewSeatsRequest): Promise<SeatKey[]> {
  if (request.seats.length === 0) return [];
  return await db.transaction().execute(async (tx) => {
    const lost: SeatKey[] = [];
    for (const seat of request.seats) {
      const result = await tx
        .updateTable("replica_seats")
        .set({ seen_at: request.now, state: seat.state, busy: seat.busy })
        .where("project_id", "=", seat.projectId)
        .where("app_id", "=", seat.appId)
        .where("seat", "=", seat.seat)
        .where("host_id", "=", request.hostId)
        .executeTakeFirst();
      if (Number(result.numUpdatedRows) === 0) {
        lost.push({ projectId: seat.projectId, appId: seat.appId, seat: seat.seat });
      }
    }
    return lost;
  });
}

/** The seats renewed at `seenSince` or later, by app and seat number. */
export function selectLiveSeats(db: Kysely<Database>, where: { seenSince: number }): Promise<SeatRow[]> {
  return db
    .selectFrom("replica_seats")
    .selectAll()
    .where("seen_at", ">=", where.seenSince)
    .orderBy("project_id")
    .orderBy("app_id")
    .orderBy("seat")
    .execute();
}

/** Deletes the seats last renewed before `seenBefore` (their hosts stopped); returns how many. */
export async function deleteStaleSeats(db: Kysely<Database>, where: { seenBefore: number }): Promise<number> {
  const result = await db.deleteFrom("replica_seats").where("seen_at", "<", where.seenBefore).executeTakeFirst();
  return Number(result.numDeletedRows);
}

/** Deletes every seat of one host (it stops). */
export async function deleteHostSeats(db: Kysely<Database>, hostId: string): Promise<void> {
  await db.deleteFrom("replica_seats").where("host_id", "=", hostId).execute();
}
