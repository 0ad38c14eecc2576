/* KV offload tier 3: block files in a directory (see kv_offload.h): atomic writes (temporary
 * name + rename), checked reads, the byte budget as an LRU over the files, the start-up scan and
 * the relisting that keeps the index current with a shared directory. */
#include "engine/kv/kv_offload_priv.h"

#include "common/clock.h"
#include "common/err.h"
#include "common/failpoint.h"
#include "common/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- tier 3 ---------------------------------------------------------------------------------- */

static void file_name(const struct kv_offload *o, uint64_t hash, char *out, size_t outlen)
{
    snprintf(out, outlen, "%s/%016" PRIx64 "-%016" PRIx64 ".kvb", o->dir, o->cfg.ns, hash);
}

/* Records a file of `bytes` for e as most recently used and evicts files over the budget (lock
 * held; unlinks under it: a quick call, and readers of an unlinked file keep their copy). */
void kvo_disk_add(struct kv_offload *o, struct kvo_entry *e, size_t bytes)
{
    if (e->file_bytes) {
        kvo_list_touch(o, KV_OFFLOAD_DISK, e);
        return;
    }
    e->file_bytes = bytes;
    kvo_list_push_mru(o, KV_OFFLOAD_DISK, e);
    o->st.bytes[KV_OFFLOAD_DISK] += bytes;
    o->st.blocks[KV_OFFLOAD_DISK]++;
    kvo_observe(o, KV_OFFLOAD_DISK, true, e->hash);
    while (o->st.bytes[KV_OFFLOAD_DISK] > o->cfg.dir_bytes) {
        struct kvo_entry *v = o->lists[KV_OFFLOAD_DISK].lru;
        char path[KVO_PATH_MAX];
        file_name(o, v->hash, path, sizeof(path));
        if (!o->disk_ro) unlink(path);
        kvo_list_unlink(o, KV_OFFLOAD_DISK, v);
        o->st.bytes[KV_OFFLOAD_DISK] -= v->file_bytes;
        o->st.blocks[KV_OFFLOAD_DISK]--;
        o->st.evicted[KV_OFFLOAD_DISK]++;
        kvo_observe(o, KV_OFFLOAD_DISK, false, v->hash);
        v->file_bytes = 0;
        if (v != e) kvo_index_put(o, v);
    }
}

/* Forgets e's file (lock held), e.g. after it failed its check. */
void kvo_disk_forget(struct kv_offload *o, struct kvo_entry *e)
{
    if (!e->file_bytes) return;
    kvo_list_unlink(o, KV_OFFLOAD_DISK, e);
    o->st.bytes[KV_OFFLOAD_DISK] -= e->file_bytes;
    o->st.blocks[KV_OFFLOAD_DISK]--;
    kvo_observe(o, KV_OFFLOAD_DISK, false, e->hash);
    e->file_bytes = 0;
}

bool kvo_disk_writable(const struct kv_offload *o)
{
    return o->disk_on && !o->disk_ro && clock_mono_s() >= o->disk_retry_at;
}

/* Writes all of buf to fd; 0 or -1 with errno. */
static int write_all(int fd, const uint8_t *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n == 0) errno = EIO;
            return -1;
        }
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

/* A failed tier-3 write (lock held): a read-only or forbidden directory stops writes for good, a
 * full one for KVO_DISK_RETRY_S; each says so once. */
void kvo_disk_write_failed(struct kv_offload *o, int err)
{
    o->st.write_errors++;
    if (err == EROFS || err == EACCES || err == EPERM) {
        o->disk_ro = true;
        log_warn("kv offload directory is not writable; tier 3 is read only", LOG_S("dir", o->dir),
                 LOG_S("err", strerror(err)));
    } else if (err == ENOSPC || err == EDQUOT) {
        if (o->disk_retry_at <= clock_mono_s())
            log_warn("kv offload directory is full; pausing tier-3 writes", LOG_S("dir", o->dir),
                     LOG_F("retry_s", KVO_DISK_RETRY_S));
        o->disk_retry_at = clock_mono_s() + KVO_DISK_RETRY_S;
    } else {
        log_warn("kv offload write failed", LOG_S("dir", o->dir), LOG_S("err", strerror(err)));
    }
}

/* Writes r as its block's file, atomically: a temporary name in the same directory, then rename
 * (a reader sees the old name absent or the whole record; concurrent writers of one block each
 * rename a whole, identical record). Offload thread; lock not held. 0 or errno. */
int kvo_disk_write(struct kv_offload *o, const struct kvo_rec *r, unsigned long seq)
{
    char tmp[KVO_PATH_MAX], path[KVO_PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s/.tmp-%ld-%lu.kvb", o->dir, (long)getpid(), seq);
    file_name(o, r->hash, path, sizeof(path));
    /* Fault injection for the degradation tests (a full disk, a volume remounted read only). */
    if (failpoint_check("kv_offload.enospc") != 0) return ENOSPC;
    if (failpoint_check("kv_offload.erofs") != 0) return EROFS;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return errno;
    int err = 0;
    if (write_all(fd, r->data, r->len) != 0) err = errno;
    if (close(fd) != 0 && !err) err = errno;
    if (!err && rename(tmp, path) != 0) err = errno;
    if (err) unlink(tmp);
    return err;
}

/* Reads the file of `want` into a new record; NULL on a miss. A file that fails its check is
 * removed and reported (*corrupt: the caller counts it). Offload thread (a prefetch); lock not
 * held. */
struct kvo_rec *kvo_disk_read(struct kv_offload *o, const struct kv_block_meta *want, bool *corrupt)
{
    char path[KVO_PATH_MAX];
    file_name(o, want->hash, path, sizeof(path));
    *corrupt = false;
    /* Fault injection: a slow disk (each read that fires takes KVO_SLOW_READ_S longer), for the
     * tests of the bounded wait and of what the inference thread never does. */
    if (failpoint_check("kv_offload.slow_read") != 0) usleep((useconds_t)(KVO_SLOW_READ_S * 1e6));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct kvo_rec *r = kvo_rec_new(o);
    struct stat sb;
    size_t got = 0;
    if (r && fstat(fd, &sb) == 0 && (uint64_t)sb.st_size == o->rec_bytes) {
        while (got < o->rec_bytes) {
            ssize_t n = read(fd, r->data + got, o->rec_bytes - got);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            got += (size_t)n;
        }
    }
    close(fd);
    if (!r) return NULL;
    int rc = got == o->rec_bytes ? kv_block_check(r->data, got, want, true) : ERR_PARSE;
    if (rc != 0) {
        free(r);
        if (rc == ERR_PARSE) { /* truncated or damaged: never serve it, never read it again */
            *corrupt = true;
            unlink(path);
            log_warn("kv offload file failed its check; removed", LOG_S("path", path));
        }
        return NULL;
    }
    r->hash = want->hash;
    r->len = got;
    r->next = NULL;
    return r;
}

/* Parses "<ns>-<hash>.kvb" of this namespace. */
static bool parse_name(const struct kv_offload *o, const char *name, uint64_t *hash)
{
    if (strlen(name) != KVO_NAME_LEN) return false;
    char ns[17], h[17];
    memcpy(ns, name, 16);
    ns[16] = 0;
    memcpy(h, name + 17, 16);
    h[16] = 0;
    if (name[16] != '-' || strcmp(name + 33, ".kvb") != 0) return false;
    char *end;
    errno = 0;
    uint64_t v = strtoull(ns, &end, 16);
    if (errno || *end || v != o->cfg.ns) return false;
    *hash = strtoull(h, &end, 16);
    return !errno && !*end;
}

static int cmp_mtime(const void *a, const void *b)
{
    const struct kvo_entry *x = *(struct kvo_entry *const *)a, *y = *(struct kvo_entry *const *)b;
    return (x->mtime > y->mtime) - (x->mtime < y->mtime);
}

/* Indexes the directory's files of this namespace, oldest first, removes temporary files a crashed
 * writer left, and applies the budget. Before the thread starts. */
static void disk_scan(struct kv_offload *o)
{
    struct stat dsb;
    if (stat(o->dir, &dsb) == 0) o->dir_mtime = dsb.st_mtim; /* before listing: see disk_rescan */
    DIR *d = opendir(o->dir);
    if (!d) {
        log_warn("cannot read the kv offload directory; tier 3 is off", LOG_S("dir", o->dir),
                 LOG_S("err", strerror(errno)));
        o->disk_on = false;
        return;
    }
    size_t n = 0, cap = 0;
    struct kvo_entry **found = NULL;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        char path[KVO_PATH_MAX];
        struct stat sb;
        uint64_t hash;
        snprintf(path, sizeof(path), "%s/%s", o->dir, de->d_name);
        if (strncmp(de->d_name, ".tmp-", 5) == 0) {
            if (!o->disk_ro && stat(path, &sb) == 0 &&
                (double)(now.tv_sec - sb.st_mtime) > KVO_TMP_STALE_S)
                unlink(path);
            continue;
        }
        if (!parse_name(o, de->d_name, &hash) || stat(path, &sb) != 0 || kvo_index_find(o, hash))
            continue;
        if ((uint64_t)sb.st_size != o->rec_bytes) { /* truncated: writes are whole (rename) */
            o->st.corrupt++;
            if (!o->disk_ro) unlink(path);
            log_warn("kv offload file failed its check; removed", LOG_S("path", path));
            continue;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            struct kvo_entry **f = realloc(found, nc * sizeof(*f));
            if (!f) break;
            found = f;
            cap = nc;
        }
        struct kvo_entry *e = kvo_index_get(o, hash);
        if (!e) break;
        e->mtime = (double)sb.st_mtime;
        found[n++] = e;
    }
    closedir(d);
    if (n) qsort(found, n, sizeof(*found), cmp_mtime);
    for (size_t i = 0; i < n; i++) kvo_disk_add(o, found[i], o->rec_bytes);
    free(found);
    log_info("kv offload directory", LOG_S("dir", o->dir), LOG_I("blocks", o->st.blocks[1]),
             LOG_I("bytes", (long long)o->st.bytes[1]), LOG_B("writable", !o->disk_ro));
}

/* Opens the tier-3 directory: creates it when missing, checks it can be read and written. */
void kvo_disk_open(struct kv_offload *o)
{
    o->disk_on = true;
    if (mkdir(o->dir, 0755) != 0 && errno != EEXIST) {
        log_warn("cannot create the kv offload directory; tier 3 is off", LOG_S("dir", o->dir),
                 LOG_S("err", strerror(errno)));
        o->disk_on = false;
        return;
    }
    if (access(o->dir, W_OK) != 0) {
        o->disk_ro = true;
        log_warn("kv offload directory is not writable; tier 3 is read only", LOG_S("dir", o->dir),
                 LOG_S("err", strerror(errno)));
    }
    disk_scan(o);
}

/* Brings the index up to date with the directory when its mtime moved since the last listing
 * (another engine sharing it wrote or removed files; this engine's own writes move it too):
 * files of this namespace not indexed yet are added as most recently used, indexed files no
 * longer listed are forgotten. Sizes are not checked here (every read checks them). Offload
 * thread; lock not held on entry. */
void kvo_disk_rescan(struct kv_offload *o)
{
    struct stat sb;
    if (stat(o->dir, &sb) != 0 ||
        (sb.st_mtim.tv_sec == o->dir_mtime.tv_sec && sb.st_mtim.tv_nsec == o->dir_mtime.tv_nsec))
        return;
    DIR *d = opendir(o->dir);
    if (!d) return;
    o->dir_mtime = sb.st_mtim; /* a change while listing moves it again: seen next time */
    size_t n = 0, cap = 0;
    uint64_t *found = NULL;
    bool whole = true;
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        uint64_t hash;
        if (!parse_name(o, de->d_name, &hash)) continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 256;
            uint64_t *f = realloc(found, nc * sizeof(*f));
            if (!f) {
                whole = false;
                break;
            }
            found = f;
            cap = nc;
        }
        found[n++] = hash;
    }
    closedir(d);
    pthread_mutex_lock(&o->mu);
    unsigned gen = ++o->scan_gen;
    for (size_t i = 0; i < n; i++) {
        struct kvo_entry *e = kvo_index_get(o, found[i]);
        if (!e) {
            whole = false;
            break;
        }
        e->scan_gen = gen;
        if (!e->file_bytes) kvo_disk_add(o, e, o->rec_bytes);
    }
    /* Only a complete listing may say a file is gone. */
    for (struct kvo_entry *e = o->lists[KV_OFFLOAD_DISK].lru, *next; whole && e; e = next) {
        next = e->link[KV_OFFLOAD_DISK].next;
        if (e->scan_gen == gen) continue;
        kvo_disk_forget(o, e);
        kvo_index_put(o, e);
    }
    pthread_mutex_unlock(&o->mu);
    free(found);
}
