"""The sans-I/O admission kernel: immutable snapshots in, decisions and
events out. No gRPC, storage, clock, NVML or randomness: time is an argument
and every result is a function of the state and the inputs."""

from .admission import Verdict, admit_events, evaluate
from .binding import bind
from .estimates import Estimate, derived_estimate, hold_for
from .events import (EVENT_TYPES, Binding, ClaimAdmitted, ClaimBound, ClaimRefused, ClaimSubmitted, ConfigApplied,
                     Event, MeterDelta,
                     Metered, PeriodRolled, Preempted, Progress, Reclaimed, Released, WorkerCordoned, WorkerLiveness,
                     WorkerRegistered, event_from_body)
from .explain import EntitlementCheck, Explanation, FieldFigure, WorkerExplanation, check_rows, explain, headline, queue_position
from .idle import ClaimVerdict, Observation, idle_verdicts, reclaim, reclamation_order
from .maintenance import cordon
from .preemption import tier
from .preemption_plan import PreemptionPlan, Victim, preemption_order
from .queue import decide
from .reasons import CheckStep, ClaimState, ErrorCode, IdleVerdict, KernelError, Placement, Reason, Tier
from .requests import progress, release, settle, submit
from .schedule import Decision, PendingReasons, period_roll, schedule
from .snapshot import (Claim, ClaimSpec, ClassStats, ClusterState, Device, DeviceShare, IdlePolicy, Resources,
                       Tenant, Threshold, Worker, WorkClass, admitted_ids)
from .transitions import Batch, EventError, apply, counted, fresh, rebuild
from .tree import TenantTree, TreeError, load_tree
from .views import TenantView, WorkerView, tenants, workers
