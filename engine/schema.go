package engine

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/durable-go/durable/internal/store"
)

// prepareSchema brings the database schema up to date, unless
// Options.SkipMigrate, and then checks that this build may run on it. It
// refuses to apply a migration that would break engines still running
// (built for a version below the migration's oldest engine), and to run on
// a schema whose migrations need a newer build than this one; a newer
// schema that declares this build's version safe (a rolling deploy's older
// engines) is fine, and logged.
func (e *Engine) prepareSchema(ctx context.Context) error {
	if !e.opts.SkipMigrate {
		plan, err := store.PlanMigration(ctx, e.store)
		if err != nil {
			return err
		}
		if err := plan.Err(); err != nil {
			return err
		}
		if len(plan.Pending) > 0 {
			if _, err := e.store.Migrate(ctx); err != nil {
				return err
			}
		}
	}
	sc, err := e.store.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if err := sc.Check(); err != nil {
		return err
	}
	if sc.Have > sc.Want {
		e.log.LogAttrs(ctx, slog.LevelInfo, "the database schema is newer than this build's and says engines of this build may run on it",
			slog.Int("schema_version", sc.Have), slog.Int("build_schema_version", sc.Want), slog.Int("oldest_engine", sc.Oldest))
	}
	return nil
}

// recordSelf records this engine in the database while Run runs, every
// store.EngineHeartbeat, so that `durable migrate` knows which schema
// versions running engines need; then forgets it.
func (e *Engine) recordSelf(ctx context.Context) {
	host, _ := os.Hostname()
	ms := e.store.Migrations()
	rec := store.EngineRecord{WorkerID: e.opts.WorkerID, SchemaVersion: ms[len(ms)-1].Version, Build: buildVersion(),
		Host: host, PID: os.Getpid()}
	t := time.NewTicker(store.EngineHeartbeat)
	defer t.Stop()
	for {
		if err := e.store.RecordEngine(ctx, rec); err == nil {
			e.hub.DB.OK(ctx, "record this engine")
		} else if ctx.Err() == nil {
			e.hub.DB.Fail(ctx, "record this engine", err, store.EngineHeartbeat)
		}
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := e.store.ForgetEngine(fctx, rec.WorkerID); err != nil {
				e.log.LogAttrs(fctx, slog.LevelWarn, "forget this engine's record; it counts as running for a minute more",
					slog.String("error", err.Error()))
			}
			return
		case <-t.C:
		}
	}
}

// buildVersion is the version of the durable module this program was
// built with, or "(devel)".
var buildVersion = sync.OnceValue(func() string {
	const module = "github.com/durable-go/durable"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if bi.Main.Path == module {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == module {
			return d.Version
		}
	}
	return "(devel)"
})
