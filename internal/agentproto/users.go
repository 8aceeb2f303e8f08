package agentproto

// MaxUserName caps a user name: useradd's own limit.
const MaxUserName = 32

// CheckUser refuses a user name no account could have. Whether the account
// exists is for the agent to say: it reads the sandbox's /etc/passwd.
func CheckUser(name string) error {
	if len(name) > MaxUserName {
		return Errorf(CodeInvalid, "user name is %d bytes, over the limit of %d", len(name), MaxUserName)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c == ':' || c == '/' || c >= 0x7f {
			return Errorf(CodeInvalid, "user name %q has a character no account name has", name)
		}
	}
	return nil
}
