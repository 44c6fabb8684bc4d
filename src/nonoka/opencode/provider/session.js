/**
 * Which session a request names, for one workspace (docs/protocol.md §7).
 *
 * The host resends the whole history on every call; the tracker reads it to decide between a
 * new conversation and a continuation, and remembers the session id the bridge reports, in
 * memory and in `<cwd>/.nonoka/provider-session.id`. The bridge has the final say on which
 * session a request runs in; the provider only sends honest hints. Same rules as
 * `nonoka.provider.client.NonokaProvider`.
 */
import { conversationKey, isContinuation } from "./protocol.js";
import { clearSessionId, idFilePath, isPlausibleSessionId, readSessionId, writeSessionId } from "./idfile.js";
/** How many conversation-key -> session-id pairs one tracker remembers. */
const KNOWN_CONVERSATIONS = 64;
export class SessionTracker {
    cwd;
    idFile;
    sessionIdHeld;
    /** Conversation key of the request that reported the held id (`undefined`: unknown, e.g. read from the file). */
    sessionKey;
    known = new Map();
    titleSessionIdHeld;
    /** The most conversation entries the bridge reported stored per session (`finish.revision`). */
    revisions = new Map();
    log;
    constructor(cwd, log = () => { }) {
        this.cwd = cwd;
        this.log = log;
        this.idFile = idFilePath(cwd);
        this.sessionIdHeld = readSessionId(this.idFile, log);
    }
    /** The chat session id held now (persisted in `idFile`). */
    get sessionId() {
        return this.sessionIdHeld;
    }
    /** The session of title requests: kept apart from the chat session, never on disk. */
    get titleSessionId() {
        return this.titleSessionIdHeld;
    }
    /**
     * The session fields of a request. A history without an assistant or tool message is a new
     * conversation: the held id is forgotten (and its file removed) and none is sent.
     */
    prepare(messages, purpose, newSession) {
        if (purpose === "compaction")
            return this.compactionHint();
        const fresh = newSession ?? !isContinuation(messages);
        // Title requests get no key: their user text is the chat's, and the bridge must never
        // recover a chat into a title session (or the reverse).
        const key = purpose === "chat" ? conversationKey(messages) : undefined;
        const sessionId = fresh ? undefined : this.sessionFor(purpose, key);
        if (fresh) {
            this.forget(purpose, key);
        }
        const hint = { newSession: fresh };
        if (sessionId !== undefined)
            hint.sessionId = sessionId;
        if (key !== undefined)
            hint.conversationKey = key;
        return hint;
    }
    /**
     * Hold the id the bridge reports; chat ids also go to disk, title ids never do, and a
     * compaction's report changes nothing held (it summarises the chat, it does not replace it).
     * A branch (`forked_from`) becomes the chat session.
     */
    adopt(purpose, key, event) {
        if (event.recovered) {
            this.log(`the bridge recovered session ${event.session_id} (reason: ${event.recovery_reason ?? "unspecified"})`);
        }
        if (!isPlausibleSessionId(event.session_id)) {
            this.log(`ignoring the session id ${JSON.stringify(event.session_id.slice(0, 80))} from the bridge: it is not a plausible session id`);
            return;
        }
        if (purpose === "title") {
            this.titleSessionIdHeld = event.session_id;
            return;
        }
        if (purpose === "compaction") {
            this.log(`compaction request ran in session ${event.session_id}; the chat session stays ${this.sessionIdHeld ?? "(none)"}`);
            return;
        }
        if (event.forked_from != null) {
            this.log(`the conversation continues in branch ${event.session_id} of session ${event.forked_from}` +
                (event.fork_point != null ? ` (shared entries: ${event.fork_point})` : ""));
        }
        this.sessionIdHeld = event.session_id;
        this.sessionKey = key;
        if (key !== undefined) {
            this.known.delete(key);
            this.known.set(key, event.session_id);
            while (this.known.size > KNOWN_CONVERSATIONS) {
                const oldest = this.known.keys().next().value;
                if (oldest === undefined)
                    break;
                this.known.delete(oldest);
            }
        }
        try {
            // Every step of a conversation reports the same id: write (and fsync, on the host's
            // event loop) only when the file does not hold it already.
            if (readSessionId(this.idFile) !== event.session_id)
                writeSessionId(this.idFile, event.session_id);
        }
        catch (error) {
            this.log(`could not save the session id to ${this.idFile} (${error.message}); it is held in memory only, ` +
                "and the bridge can still recover it by conversation key");
        }
    }
    /**
     * A compaction request names the chat it summarises and never starts or forgets one.
     *
     * After it, the host's history starts from the summary ("What did we do so far?"), so the
     * chat's first user message, and with it its conversation key, changes: the held id's key
     * becomes unknown, as for an id read from the file, so the next continuation still sends it
     * (the bridge checks the history) and the new key is learnt from the answer.
     */
    compactionHint() {
        const hint = { newSession: false };
        if (this.sessionIdHeld !== undefined)
            hint.sessionId = this.sessionIdHeld;
        if (this.sessionKey !== undefined)
            hint.conversationKey = this.sessionKey;
        this.sessionKey = undefined;
        return hint;
    }
    /**
     * Remember how many entries the bridge said it stored for a session at the end of a
     * request (`finish.revision`); the highest is sent back with the next request that names
     * the session, and a bridge holding fewer warns that its store went back in time.
     */
    noteRevision(sessionId, revision) {
        if (sessionId === undefined || typeof revision !== "number")
            return;
        const seen = this.revisions.get(sessionId);
        if (seen === undefined || revision > seen)
            this.revisions.set(sessionId, revision);
    }
    /** The revision to send with a request that names `sessionId`. */
    revisionOf(sessionId) {
        return sessionId === undefined ? undefined : this.revisions.get(sessionId);
    }
    /**
     * The id a continuation sends: normally the held one. When the held id is known to belong to
     * another conversation (two conversations alternating through one host), send that
     * conversation's own id, or none and let the bridge recover by key — never the other's.
     */
    sessionFor(purpose, key) {
        if (purpose === "title")
            return this.titleSessionIdHeld;
        if (key !== undefined) {
            const known = this.known.get(key);
            if (known !== undefined)
                return known;
        }
        if (this.sessionKey === undefined || key === undefined || this.sessionKey === key) {
            return this.sessionIdHeld;
        }
        return undefined;
    }
    /** A new conversation: drop the held id, and its on-disk copy with it. */
    forget(purpose, key) {
        if (purpose === "title") {
            this.titleSessionIdHeld = undefined;
            return;
        }
        if (key !== undefined)
            this.known.delete(key);
        this.sessionIdHeld = undefined;
        this.sessionKey = undefined;
        try {
            clearSessionId(this.idFile);
        }
        catch (error) {
            this.log(`could not remove the stale session id file ${this.idFile}: ${error.message}`);
        }
    }
}
