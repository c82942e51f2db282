// graphile-worker as a contender of `sbworker bench`.
//
//   node headline.js migrate CONNECTION
//   node headline.js CONNECTION CONCURRENCY POOL LOCAL_QUEUE_SIZE
//
// `migrate` installs graphile-worker's schema and exits (the bench then preloads jobs
// with graphile_worker.add_job). Otherwise:
//
// Runs the `apply` task for the jobs the bench preloaded (one job per message, a named
// queue per group standing in for a conversation group, so a group's jobs run one at a
// time in order) until SIGTERM. A task applies its message's effect in a transaction of
// its own (graphile-worker completes the job afterwards, in another: it cannot complete
// a job inside the business transaction). LOCAL_QUEUE_SIZE 0 runs without the local
// queue (jobs fetched one by one), N > 0 with it. A job marked poison (`p`, by the bench's
// poison workload) fails every attempt; the bench adds jobs with 3 attempts (sbworker's),
// after which graphile-worker fails them for good; it waits exp(attempts) seconds between
// attempts (its own schedule, which it does not let a user change). An open-loop job
// carries its planned send time (`t`), which the reply records.
const { run, makeWorkerUtils } = require("graphile-worker");

async function main() {
  if (process.argv[2] === "migrate") {
    const utils = await makeWorkerUtils({ connectionString: process.argv[3] });
    await utils.migrate();
    await utils.release();
    return;
  }
  const [connectionString, concurrency, pool, localQueue] = process.argv.slice(2);
  const preset = {
    worker: {
      connectionString,
      concurrentJobs: Number(concurrency),
      maxPoolSize: Number(pool),
      pollInterval: 1000,
      ...(Number(localQueue) > 0 ? { localQueue: { size: Number(localQueue) } } : {}),
    },
  };
  const runner = await run({
    preset,
    noHandleSignals: false,
    taskList: {
      apply: async (payload, helpers) => {
        if (payload.p) {
          throw new Error(`bench: job ${payload.s} of ${payload.c} is poison`);
        }
        await helpers.withPgClient(async (c) => {
          await c.query("BEGIN");
          try {
            await c.query("SELECT bench.apply($1, $2, convert_to($3, 'UTF8'))", [payload.c, payload.s, payload.t ?? null]);
            await c.query("COMMIT");
          } catch (e) {
            await c.query("ROLLBACK");
            throw e;
          }
        });
      },
    },
  });
  console.log("graphile-worker running");
  await runner.promise;
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
