package protocol

// The messages below are sent to actors: each counts in flight on the
// runtime's clock until its receiver has handled it (internal/track).
// Wire data that no actor receives (history entries, records, events
// written out) is not among them.
func (*AbortRequest) Tracked()            {}
func (*AbortRetryRequest) Tracked()       {}
func (*AttachPrompt) Tracked()            {}
func (*CompactRequest) Tracked()          {}
func (*CredentialSelected) Tracked()      {}
func (*HandOver) Tracked()                {}
func (*MarkUsageLimitReached) Tracked()   {}
func (*MessagesRequest) Tracked()         {}
func (*NextModelReply) Tracked()          {}
func (*NextModelRequest) Tracked()        {}
func (*PacingCancel) Tracked()            {}
func (*PacingGrant) Tracked()             {}
func (*PacingObserve) Tracked()           {}
func (*PacingSettle) Tracked()            {}
func (*PromptRequest) Tracked()           {}
func (*ReleaseSession) Tracked()          {}
func (*RetryBudgetDrop) Tracked()         {}
func (*RetryBudgetGrant) Tracked()        {}
func (*RetryBudgetOutcome) Tracked()      {}
func (*RetryBudgetRelease) Tracked()      {}
func (*RetryBudgetRequest) Tracked()      {}
func (*RetryBudgetStatsRequest) Tracked() {}
func (*SelectCredential) Tracked()        {}
func (*SessionClose) Tracked()            {}
func (*SessionOptions) Tracked()          {}
func (*SetAutoRetryRequest) Tracked()     {}
func (*SetModelRequest) Tracked()         {}
func (*UsageLimitReply) Tracked()         {}
