"""What a launch leaves in the state folder and every later process reads: the run records, the shared monitors'
registrations and the audit trail."""
