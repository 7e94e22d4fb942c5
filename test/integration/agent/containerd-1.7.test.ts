import { agentScenarios } from './agent-suite.js';

agentScenarios('1.7');
