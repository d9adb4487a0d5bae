"""What the scheduler's helpers see of it: the parts that both its commands
(``commands.Commanded``) and its snapshots (``snapshot.Observed``) read, as a Protocol, so that
neither imports the scheduler (``app.engine.scheduling.scheduler.Scheduler`` has them all)."""

from __future__ import annotations

from typing import Protocol

from app.engine.scheduling.admission import Admitter
from app.engine.scheduling.finishing import Finisher
from app.engine.scheduling.request_table import RequestTable
from app.engine.scheduling.sessions import SeqPool
from app.engine.speculation.speculator import Speculator


class SchedulerParts(Protocol):
    @property
    def reqs(self) -> RequestTable: ...
    @property
    def pool(self) -> SeqPool: ...
    @property
    def admission(self) -> Admitter: ...
    @property
    def finisher(self) -> Finisher: ...
    @property
    def speculator(self) -> Speculator: ...
