/**
 * Warm bridges: `nonoka bridge` processes kept between the model steps of one host session.
 *
 * A bridge serves requests one after another on one stdin, and everything a step needs is in
 * the database (the bridge reloads the session on every request, and its in-process caches
 * check what they keep against the stored digest chain and revision). So after a step's
 * `finish`, the process that served it can wait for the next step instead of exiting, and
 * that step skips the interpreter start and the runtime's imports. Nothing is lost when a
 * warm process dies at any moment: the pool drops it when it exits; a step whose request it
 * never acknowledged goes to a new process (`BridgeCall`); a step it was serving fails as a
 * per-step process's would, and the next one spawns anew.
 *
 * An idle bridge holds no lease and no open request. It is unreferenced (the host may exit
 * while it waits; the bridge then reads end of input and exits), and ends after `idleMs`
 * without a step: the pool closes its stdin. One idle bridge is kept per host session, at
 * most `maxIdle` in all (the least recently used one goes first).
 */
import { EventEmitter } from "node:events";
export class BridgePool {
    idleMs;
    maxIdle;
    log;
    /** `retired` (pid, reason) when the pool lets a bridge go; `exit` (pid) when one it let go has exited. */
    events = new EventEmitter();
    idle = [];
    constructor(idleMs, maxIdle, log = () => { }) {
        this.idleMs = idleMs;
        this.maxIdle = maxIdle;
        this.log = log;
    }
    /** The pids of the bridges waiting for a step. */
    pids() {
        return this.idle.map((entry) => entry.bridge.pid).filter((pid) => pid !== undefined);
    }
    /**
     * A running idle bridge of `group`: the one that served `affinity` last, else the most
     * recently used one. It is referenced again (the host waits on it now).
     */
    take(group, affinity) {
        let at = -1;
        for (let i = this.idle.length - 1; i >= 0; i--) {
            const entry = this.idle[i];
            if (entry === undefined || entry.group !== group || !entry.bridge.running)
                continue;
            if (entry.affinity === affinity) {
                at = i;
                break;
            }
            if (at < 0)
                at = i;
        }
        if (at < 0)
            return undefined;
        const [entry] = this.idle.splice(at, 1);
        if (entry === undefined)
            return undefined;
        this.detach(entry);
        entry.bridge.setRef(true);
        return entry.bridge;
    }
    /** Keep `bridge`, which has just finished a step, for the next step of `affinity`. */
    give(group, affinity, bridge) {
        if (!bridge.running)
            return;
        for (const entry of this.idle.filter((e) => e.group === group && e.affinity === affinity)) {
            this.retire(entry, "surplus"); // one idle bridge per host session is enough
        }
        bridge.setRef(false);
        const entry = {
            bridge,
            group,
            affinity,
            timer: setTimeout(() => this.retire(entry, "idle"), this.idleMs),
            onExit: () => {
                // Killed or crashed while it waited: nothing was in flight, so nothing is lost.
                if (this.remove(entry)) {
                    this.log(`a warm bridge (pid ${bridge.pid ?? "?"}) ended while idle (${bridge.describeExit()})`);
                    this.events.emit("retired", bridge.pid, "exited");
                    this.events.emit("exit", bridge.pid);
                }
            },
        };
        entry.timer.unref();
        bridge.onExit(entry.onExit);
        this.idle.push(entry);
        while (this.idle.length > this.maxIdle) {
            const oldest = this.idle[0];
            if (oldest === undefined)
                break;
            this.retire(oldest, "surplus");
        }
    }
    /** End every idle bridge (close its stdin; it exits) and wait for them to exit. */
    async close(graceMs = 5000) {
        const entries = [...this.idle];
        await Promise.all(entries.map((entry) => this.retire(entry, "closed", graceMs)));
    }
    /** Let an idle bridge go: end of input, which it answers by exiting (firmly, if it lingers). */
    async retire(entry, reason, graceMs = 5000) {
        if (!this.remove(entry))
            return;
        const bridge = entry.bridge;
        this.events.emit("retired", bridge.pid, reason);
        await bridge.stop(graceMs);
        this.events.emit("exit", bridge.pid);
    }
    remove(entry) {
        const at = this.idle.indexOf(entry);
        if (at < 0)
            return false;
        this.idle.splice(at, 1);
        this.detach(entry);
        return true;
    }
    detach(entry) {
        clearTimeout(entry.timer);
        entry.bridge.offExit(entry.onExit);
    }
}
/** The group of a bridge: what a step must run with to be served by it. */
export function bridgeGroup(command, env, cwd) {
    const vars = Object.entries(env).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return JSON.stringify([command, vars, cwd]);
}
