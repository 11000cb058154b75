/*
 * mqbridge's Delta Lake log store for tables on a local (or any POSIX) file system, `file:` paths
 * (`mqbridge.landing.log_store`, which builds it into <jars_dir>/delta with `mqbridge jars delta` and names
 * it as spark.delta.logStore.file.impl).
 *
 * Why: Delta's default store for `file:` (HDFSLogStore) makes each log file through Hadoop's FileContext:
 * a temporary file and its checksum sidecar, then a rename of both that must fail if the target exists.
 * Without Hadoop's native library (which no Maven or Debian package provides here) Hadoop's local file
 * system forks a process for each permission it sets (`chmod`, per created file) and for each status it
 * reads through FileContext (`readlink`, per path a rename looks at): 20 processes per Delta commit,
 * measured with strace, about 3 ms each on a quiet 2-core host, all of it on the commit's critical path,
 * where bulks of one table wait for each other.
 *
 * How: the same mutual exclusion by the file system's own primitive, without a fork: the actions are
 * written to a hidden temporary file beside the target (java.nio), which is then hard-linked to the
 * target's name. link(2) fails with EEXIST when the target exists, whoever made it, atomically: of two
 * writers of one version (two bridges on one table) the later gets the
 * java.nio.file.FileAlreadyExistsException by which Delta detects a concurrent commit, and retries on
 * the next version after its conflict check. A file system without hard links (some FUSE or SMB mounts)
 * gets Delta's own store's write instead. Like Delta's store, no fsync: the data files Spark writes are
 * not synced either. Overwrites (`_last_checkpoint`) replace the target by an atomic rename. Reads and
 * listings are Delta's own.
 */
package org.mqbridge.delta;

import io.delta.storage.HDFSLogStore;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

public class LocalLinkLogStore extends HDFSLogStore {

    public LocalLinkLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        java.nio.file.Path target = localPath(path, hadoopConf);
        if (target == null) {  // not a local path after all: Delta's own store
            super.write(path, actions, overwrite, hadoopConf);
            return;
        }
        java.nio.file.Path temporary = target.resolveSibling(
                "." + target.getFileName() + "." + UUID.randomUUID() + ".tmp");
        if (!Files.isDirectory(target.getParent())) {
            Files.createDirectories(target.getParent());  // as Delta's own store's create does
        }
        List<String> lines = new ArrayList<>();
        actions.forEachRemaining(lines::add);
        try (OutputStream out = Files.newOutputStream(temporary, StandardOpenOption.CREATE_NEW)) {
            for (String line : lines) {
                out.write((line + "\n").getBytes(StandardCharsets.UTF_8));
            }
        }
        try {
            if (overwrite) {
                Files.move(temporary, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
                return;
            }
            try {
                Files.createLink(target, temporary);
            } catch (FileAlreadyExistsException exists) {
                throw exists;  // another writer's version: Delta's concurrent commit
            } catch (UnsupportedOperationException | IOException noLinks) {
                // no hard links on this file system: Delta's own store (a rename that refuses a target)
                Files.deleteIfExists(temporary);
                super.write(path, lines.iterator(), overwrite, hadoopConf);
                return;
            }
        } finally {
            Files.deleteIfExists(temporary);
        }
    }

    /** `path` on the local file system, or null when it is on another one. */
    static java.nio.file.Path localPath(Path path, Configuration hadoopConf) throws IOException {
        Path qualified = path.getFileSystem(hadoopConf).makeQualified(path);
        if (!"file".equals(qualified.toUri().getScheme())) {
            return null;
        }
        return java.nio.file.Paths.get(qualified.toUri());
    }

    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false;  // a log file appears by a link or a rename of a finished file: whole or not at all
    }
}
