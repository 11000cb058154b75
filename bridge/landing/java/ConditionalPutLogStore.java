/*
 * mqbridge's Delta Lake log store for s3a:// tables (`mqbridge.landing.log_store`, which builds it into
 * <jars_dir>/delta with `mqbridge jars delta` and names it as spark.delta.logStore.s3a.impl).
 *
 * Why: Delta's default log store for S3 (S3SingleDriverLogStore) makes a commit's log file
 * `_delta_log/<version>.json` with an ordinary PUT after checking that it is absent. Two drivers that
 * commit the same version at once both pass the check, and the later PUT replaces the earlier file:
 * a commit that was acknowledged is gone (seen here: two bridges on one table on S3, 50 of 400
 * messages in no version). Mutual exclusion is what Delta asks of a log store: "only one writer must
 * be able to create a file at the final destination".
 *
 * How: each new log file is made by a conditional PUT (If-None-Match: *), through S3A's own builder
 * option (Hadoop 3.4.2: fs.option.create.conditional.overwrite). The store refuses the PUT of a file
 * that exists (HTTP 412), whoever wrote it and however late the writer is (a driver resumed after a
 * stall included), and this store turns the refusal into the java.nio.file.FileAlreadyExistsException
 * by which Delta detects a concurrent commit: it then reads the winner's commit, checks for a
 * conflict (an idempotent write's txn version already committed is skipped) and tries the next version.
 * Overwrites (`_last_checkpoint`) stay plain PUTs. Reads and listings are Delta's own for any Hadoop
 * file system: S3 lists what it stored.
 */
package org.mqbridge.delta;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

public class ConditionalPutLogStore extends HadoopFileSystemLogStore {
    /** S3A's option of a create that the store must refuse when the object exists. */
    static final String CONDITIONAL = "fs.option.create.conditional.overwrite";

    public ConditionalPutLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        if (overwrite) {
            try (FSDataOutputStream out = fs.create(path, true)) {
                writeLines(out, actions);
            }
            return;
        }
        try {
            // S3A sends the object at close(), with If-None-Match: * (a create refused before any byte
            // is sent when the object is already listed).
            try (FSDataOutputStream out =
                         (FSDataOutputStream) fs.createFile(path).overwrite(false).must(CONDITIONAL, true).build()) {
                writeLines(out, actions);
            }
        } catch (IOException e) {
            if (alreadyThere(e)) {
                java.nio.file.FileAlreadyExistsException exists =
                        new java.nio.file.FileAlreadyExistsException(path.toString());
                exists.initCause(e);
                throw exists;
            }
            throw e;
        }
    }

    private static void writeLines(FSDataOutputStream out, Iterator<String> actions) throws IOException {
        while (actions.hasNext()) {
            out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
        }
    }

    /** Whether `e` says the object exists: S3A's check before the PUT, or the store's refusal of it. */
    static boolean alreadyThere(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            String name = t.getClass().getName();
            String message = String.valueOf(t.getMessage());
            if (name.equals("org.apache.hadoop.fs.FileAlreadyExistsException")
                    || name.equals("java.nio.file.FileAlreadyExistsException")
                    || message.contains("PreconditionFailed") || message.contains("Status Code: 412")) {
                return true;
            }
        }
        return false;
    }

    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false;  // an S3 object is seen whole or not at all
    }
}
